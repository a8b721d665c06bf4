"""The trace browser's pages and fragments (under ``/traces/``)."""

from __future__ import annotations

from django.urls import path

from traces import views

app_name = "traces"

urlpatterns = [
    path("", views.trace_list, name="list"),
    path("new/", views.trace_list_new, name="new"),
    path("<uuid:trace_id>/", views.trace_page, name="detail"),
    path("<uuid:trace_id>/row/", views.trace_list_row, name="list_row"),
    path("<uuid:trace_id>/children/<str:node>/", views.trace_children, name="children"),
    path("<uuid:trace_id>/rows/", views.trace_rows, name="rows"),
    path("<uuid:trace_id>/steps/<uuid:step_id>/", views.step_detail, name="step"),
    path("<uuid:trace_id>/steps/<uuid:step_id>/data.json", views.step_data, name="step_data"),
    path("<uuid:trace_id>/search/", views.trace_search, name="search"),
    path("<uuid:trace_id>/next/", views.trace_next, name="next"),
    path("<uuid:trace_id>/timeline/", views.trace_timeline, name="timeline"),
    path("<uuid:trace_id>/export.json", views.trace_export, name="export"),
]
