from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from sandboxes.metrics import metrics_view
from sandboxes.views.auth import RateLimitedLoginView, login_limited

urlpatterns = [
    # Django admin's login form checks passwords too: the same limiter guards it.
    path("admin/login/", login_limited(admin.site.login), name="admin-login"),
    path("admin/", admin.site.urls),
    path("accounts/login/", RateLimitedLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include("sandboxes.api.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("", include("sandboxes.urls")),
]
