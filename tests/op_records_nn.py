"""Op records for the nn ops (see ``op_records.py`` for the record format)."""

from __future__ import annotations

from op_records import OpRecord

RECORDS: list[OpRecord] = []
