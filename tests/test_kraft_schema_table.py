"""The compact schema table (kafkalog.record.schema_table) that kraft_schemas is written in.

Expected dicts are Kafka's BrokerRegistrationChangeRecord.json and LeaderChangeMessage.json (apache/kafka
metadata/src/main/resources/common/metadata, clients/src/main/resources/common/message) as the generator reads
them: ranges as inclusive tuples with 32767 for an open end, ``about`` texts dropped.
"""

from __future__ import annotations

import pytest

from kafkalog.record.kraft_schemas import CONTROL_RECORDS, CONTROL_TABLE, METADATA_RECORDS, METADATA_TABLE
from kafkalog.record.schema_table import format_messages, format_versions, parse_messages, parse_versions

OPEN = 0x7FFF


def test_a_metadata_record_reads_as_kafkas_json():
    assert METADATA_RECORDS[17] == {
        "name": "BrokerRegistrationChangeRecord",
        "validVersions": (0, 2),
        "flexibleVersions": (0, OPEN),
        "fields": [
            {"name": "BrokerId", "type": "int32", "versions": (0, OPEN)},
            {"name": "BrokerEpoch", "type": "int64", "versions": (0, OPEN)},
            {"name": "Fenced", "type": "int8", "versions": (0, OPEN), "taggedVersions": (0, OPEN), "tag": 0},
            {
                "name": "InControlledShutdown",
                "type": "int8",
                "versions": (1, OPEN),
                "taggedVersions": (1, OPEN),
                "tag": 1,
            },
            {"name": "LogDirs", "type": "[]uuid", "versions": (2, OPEN), "taggedVersions": (2, OPEN), "tag": 2},
        ],
        "apiKey": 17,
    }


def test_a_control_record_keeps_its_common_struct():
    leader_change = CONTROL_RECORDS["LeaderChangeMessage"]
    assert leader_change["validVersions"] == (0, 1)
    assert [f["name"] for f in leader_change["fields"]] == ["Version", "LeaderId", "Voters", "GrantingVoters"]
    assert leader_change["commonStructs"] == {
        "Voter": [
            {"name": "VoterId", "type": "int32", "versions": (0, OPEN)},
            {"name": "VoterDirectoryId", "type": "uuid", "versions": (1, OPEN)},
        ]
    }


@pytest.mark.parametrize("table", [METADATA_TABLE, CONTROL_TABLE])
def test_the_tables_are_written_back_as_they_stand(table):
    assert format_messages(parse_messages(table)) == table.lstrip("\n")


def test_attributes_that_differ_from_the_field_versions_round_trip():
    spec = {
        "name": "Odd",
        "validVersions": (1, 3),
        "flexibleVersions": None,
        "fields": [
            {
                "name": "Items",
                "type": "[]Item",
                "versions": (1, 3),
                "nullableVersions": (2, OPEN),
                "taggedVersions": (3, OPEN),
                "flexibleVersions": (2, OPEN),
                "tag": 4,
                "default": "",
                "ignorable": True,
                "fields": [{"name": "Key", "type": "string", "versions": (0, OPEN)}],
            }
        ],
    }
    text = format_messages([spec])
    field_line = "  Items []Item 1-3 nullable=2+ tag=4 tagged=3+ flexible=2+ default= ignorable"
    assert text == f"Odd 1-3\n{field_line}\n    Key string\n"
    assert parse_messages(text) == [spec]


@pytest.mark.parametrize(("text", "versions"), [("0", (0, 0)), ("0-3", (0, 3)), ("2+", (2, OPEN))])
def test_version_ranges_are_kafkas_text(text, versions):
    assert parse_versions(text) == versions
    assert format_versions(versions) == text


def test_an_unknown_attribute_is_refused():
    with pytest.raises(ValueError, match="unknown attribute 'nulable'"):
        parse_messages("1 Rec 0\n  Name string nulable\n")
    with pytest.raises(ValueError, match="indented too far"):
        parse_messages("1 Rec 0\n    Name string\n")
