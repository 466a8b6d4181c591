"""A database that cannot answer in time is a 503 the exporter retries, not a lost export."""

from __future__ import annotations

import psycopg
import pytest
from django.db import connection

from intake.otlp.models import IngestedSignal
from intake.otlp.tokens import token_create
from ledger.models import InboundEvent
from tests.intake.test_otlp_refusals import error_log, post, status_of

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("committed"),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="needs a second real session"),
]


def test_a_table_locked_by_another_session_is_503_with_retry_after(client, workspace):
    _, token = token_create(workspace)
    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params) as other:
        # Another session holds the signals table (a migration, a long VACUUM FULL): the
        # request's own lock wait gives up instead of hanging the exporter.
        other.execute(f"LOCK TABLE {IngestedSignal._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '300ms'")
        try:
            response = post(client, error_log(), token=token)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
        other.rollback()
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert status_of(response).code == 14
    assert IngestedSignal.objects.count() == 0
    assert InboundEvent.objects.count() == 0
    assert post(client, error_log(), token=token).status_code == 200
