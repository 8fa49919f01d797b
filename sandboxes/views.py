"""HTML views of the operator console."""

from django.contrib.auth.decorators import login_required
from django.db.models import Count
from django.shortcuts import render

from sandboxes.models import EnvironmentLease, Retirement


@login_required
def home(request):
    stages = dict(Retirement.objects.values_list("stage").annotate(n=Count("id")).order_by())
    context = {
        "stages": stages,
        "lease_count": EnvironmentLease.objects.count(),
        "recent": Retirement.objects.select_related("environment").order_by("-updated_at")[:20],
    }
    return render(request, "sandboxes/home.html", context)
