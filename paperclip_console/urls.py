from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, reverse_lazy

from sandboxes.metrics import metrics_view
from sandboxes.views.auth import RateLimitedLoginView, login_limited

urlpatterns = [
    # Django admin's login form checks passwords too: the same limiter guards it.
    path("admin/login/", login_limited(admin.site.login), name="admin-login"),
    path("admin/", admin.site.urls),
    path("accounts/login/", RateLimitedLoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    # The set-password link an admin sends from the Users page (sandboxes/people.py).
    path(
        "accounts/set-password/<uidb64>/<token>/",
        auth_views.PasswordResetConfirmView.as_view(
            template_name="registration/set_password.html",
            success_url=reverse_lazy("password-set-done"),
        ),
        name="password-set",
    ),
    path(
        "accounts/set-password/done/",
        auth_views.PasswordResetCompleteView.as_view(
            template_name="registration/set_password_done.html"
        ),
        name="password-set-done",
    ),
    path("api/v1/", include("sandboxes.api.urls")),
    path("metrics", metrics_view, name="metrics"),
    path("", include("sandboxes.urls")),
]
