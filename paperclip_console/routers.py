"""Keeps django-q2's tables in their own SQLite file in the embedded setup."""


class BrokerRouter:
    app_label = "django_q"

    def db_for_read(self, model, **hints):
        return "broker" if model._meta.app_label == self.app_label else None

    db_for_write = db_for_read

    def allow_relation(self, obj1, obj2, **hints):
        return None

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        if app_label == self.app_label:
            return db == "broker"
        return db == "default"
