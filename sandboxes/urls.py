from django.urls import path

from sandboxes import views

urlpatterns = [
    path("", views.home, name="home"),
]
