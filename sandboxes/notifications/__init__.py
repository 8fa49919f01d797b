"""Notifications: channels (Apprise URLs and Standard Webhooks), the events the
console announces, and their delivery by django-q2 tasks outside the
reconciler's transactions."""
