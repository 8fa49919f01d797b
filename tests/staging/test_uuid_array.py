"""sandboxes/staging.py:uuid_array writes the literal str() of each id would."""

import uuid

from sandboxes.staging import uuid_array


def test_the_literal_is_each_id_as_str_writes_it():
    ids = [uuid.uuid4() for _ in range(50)] + [uuid.UUID(int=0), uuid.UUID(int=2**128 - 1)]
    literal = "{" + ",".join(map(str, ids)) + "}"
    assert uuid_array(ids) == literal
    assert uuid_array(pk for pk in ids) == literal  # any iterable
    assert uuid_array([]) == "{}"
