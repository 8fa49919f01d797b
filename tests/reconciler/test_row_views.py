"""The stop refusals' rows read as Django reads them, straight into the views
(sandboxes/reconciler/predicates.py): jsonb decoded by orjson where it reads
as json.loads does, json.loads elsewhere; the views' arguments in the rows' order."""

import inspect

import pytest

from sandboxes import models as m
from sandboxes.reconciler import candidates, predicates
from tests import factories as f

DOCUMENTS = [
    {},
    {"pluginId": "p", "n": [1, 2.5, None, True, False]},
    {"big": 123456789012345678901234567890, "neg": -(2**64), "edge": 2**63 - 1},
    {"float": 0.1, "tiny": 5e-324, "exp": 1.5e300, "pi": 3.141592653589793, "neg0": -0.0},
    {"text": 'é ✓ "quoted" \\ back \n line \u0001', "nested": {"a": {"b": [{"c": "d"}]}}},
    {"digits": "1234567890123456789012", "long": 12345678901234567.25},
]


@pytest.mark.django_db
@pytest.mark.parametrize("document", DOCUMENTS, ids=range(len(DOCUMENTS)))
def test_jsonb_rows_are_the_values_django_reads(document):
    lease = f.EnvironmentLeaseFactory(metadata=document)
    f.ReceiptFactory(lease=lease, payload=document)
    rows = m.Receipt.objects.filter(lease=lease).values_list(*predicates._ROW_FIELDS)
    fetched = candidates.fetch_rows(rows)
    assert fetched and fetched == list(rows)
    assert [[type(v) for v in row] for row in fetched] == [[type(v) for v in row] for row in rows]
    assert repr(fetched) == repr(list(rows))  # every float to its last digit


def test_the_views_take_the_rows_columns_in_order():
    receipt = tuple(inspect.signature(predicates._receipt).parameters)
    lease = tuple(inspect.signature(predicates._lease).parameters)
    assert receipt == predicates.ReceiptRow._fields
    assert lease == (*predicates.LeaseRow._fields, "stop_only_pending")
