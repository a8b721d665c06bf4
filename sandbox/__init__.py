"""The sandbox: the only package that talks to Docker."""
