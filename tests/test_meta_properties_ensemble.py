"""Start-up checks of the log dirs' meta.properties (Kafka's MetaPropertiesEnsemble.verify) and what is written
into a dir that has none, through the LogManager and the CLI.

The meta.properties used are real ones: a KRaft broker's (version 1 with node.id and directory.id) and a
ZooKeeper-era broker's (version 0 with broker.id), from the fixtures.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import fixture_path
from kafkalog.cli import main
from kafkalog.errors import InconsistentBrokerIdError, InconsistentBrokerMetadataError, InconsistentClusterIdError
from kafkalog.logdir import LogDirLock, MetaProperties
from kafkalog.manager import LogManager
from kafkalog.storage.properties import parse_properties

KRAFT_META = ("broker-logs", "itumelengmogase-cp77-kraft", "kafka-data", "meta.properties")
ZK_META = ("broker-logs", "bheem6005-kafka", "kafka-logs", "meta.properties")


def real_props(parts: tuple[str, ...]) -> dict[str, str]:
    return parse_properties(fixture_path(*parts).read_text(encoding="iso-8859-1"))


def make_dir(path: Path, props: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    (path / "meta.properties").write_text("".join(f"{k}={v}\n" for k, v in props.items()), encoding="ascii")
    return path


def kraft_props(**changes: str) -> dict[str, str]:
    props = real_props(KRAFT_META)
    props.pop("directory.id")
    props.update(changes)
    return props


def refused(dirs: list[Path], config: dict | None = None) -> Exception:
    manager = LogManager(dirs, config or {})
    with pytest.raises(InconsistentBrokerMetadataError) as info:
        manager.startup()
    for d in dirs:  # the locks are released: the dirs can be opened again
        LogDirLock(d).acquire().release()
    return info.value


def test_the_dirs_of_two_brokers_are_refused_with_kafkas_message(tmp_path):
    props = real_props(KRAFT_META)
    assert props["node.id"] == "1"
    a = make_dir(tmp_path / "a", kraft_props())
    b = make_dir(tmp_path / "b", kraft_props(**{"node.id": "2"}))
    empty = tmp_path / "c"
    error = refused([a, b, empty])
    assert isinstance(error, InconsistentBrokerIdError)
    assert str(error) == (
        f"Stored node id 2 doesn't match previous node id 1 in {b / 'meta.properties'}. If you moved your data, "
        "make sure your configured node id matches. If you intend to create a new node, you should remove all data "
        "in your data directories."
    )
    assert not (empty / "meta.properties").exists()  # nothing is written when the check fails


def test_the_dirs_of_two_clusters_are_refused_with_kafkas_message(tmp_path):
    cluster = real_props(KRAFT_META)["cluster.id"]
    a = make_dir(tmp_path / "a", kraft_props())
    b = make_dir(tmp_path / "b", kraft_props(**{"cluster.id": "P4mWrUMKRvm3AylnZYNBaQ"}))
    error = refused([a, b])
    assert isinstance(error, InconsistentClusterIdError)
    assert str(error) == (
        f"Invalid cluster.id in: {b / 'meta.properties'}. Expected {cluster}, but read P4mWrUMKRvm3AylnZYNBaQ"
    )


def test_zookeeper_era_dirs_of_two_brokers_are_refused(tmp_path):
    props = real_props(ZK_META)
    assert props["version"] == "0" and props["broker.id"] == "0"
    a = make_dir(tmp_path / "a", props)
    b = make_dir(tmp_path / "b", {**props, "broker.id": "7"})
    error = refused([a, b])
    assert isinstance(error, InconsistentBrokerIdError)
    assert str(error).startswith(f"Stored node id 7 doesn't match previous node id 0 in {b / 'meta.properties'}.")


def test_the_configured_node_id_must_match_the_stored_one(tmp_path):
    a = make_dir(tmp_path / "a", kraft_props())
    error = refused([a], {"node.id": "5"})
    assert str(error).startswith(f"Stored node id 1 doesn't match previous node id 5 in {a / 'meta.properties'}.")
    error = refused([a], {"broker.id": "5"})  # broker.id: node.id's ZooKeeper-era synonym
    assert isinstance(error, InconsistentBrokerIdError)
    with LogManager([a], {"node.id": "1"}):
        pass


def test_one_directory_id_in_two_dirs_is_refused(tmp_path):
    props = real_props(KRAFT_META)
    a = make_dir(tmp_path / "a", props)
    b = make_dir(tmp_path / "b", props)  # a copied dir
    error = refused([a, b])
    assert str(error) == (
        f"Duplicate directory ID Optional[{props['directory.id']}] found. It was the ID of {a}, but also of {b}"
    )


def test_the_cli_refuses_them_too(tmp_path):
    a = make_dir(tmp_path / "a", kraft_props())
    b = make_dir(tmp_path / "b", kraft_props(**{"node.id": "2"}))
    args = ["topics", "--create", "--topic", "t", "--log-dir", str(a), "--log-dir", str(b)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 1
    assert "Error: Stored node id 2 doesn't match previous node id 1" in result.output
    assert not list(a.glob("t-*")) and not list(b.glob("t-*"))


def test_a_dir_without_meta_properties_beside_a_kraft_one_gets_the_same_ids(tmp_path):
    props = real_props(KRAFT_META)
    a = make_dir(tmp_path / "a", props)
    new = tmp_path / "new"
    with LogManager([a, new], {}):
        pass
    meta = MetaProperties.read(new)
    assert (meta.version, meta.cluster_id, meta.node_id) == (1, props["cluster.id"], 1)
    assert meta.directory_id is not None and meta.directory_id != props["directory.id"]
    assert (a / "meta.properties").read_text() == "".join(f"{k}={v}\n" for k, v in props.items())  # untouched


def test_a_dir_without_meta_properties_beside_a_zookeeper_era_one_gets_version_0(tmp_path):
    props = real_props(ZK_META)
    a = make_dir(tmp_path / "a", props)
    new = tmp_path / "new"
    with LogManager([a, new], {}):
        pass
    written = parse_properties((new / "meta.properties").read_text(encoding="iso-8859-1"))
    assert written == {"version": "0", "cluster.id": props["cluster.id"], "broker.id": "0"}


def test_fresh_dirs_share_one_new_cluster_and_the_configured_node_id(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    with LogManager(dirs, {"node.id": "3"}):
        pass
    metas = [MetaProperties.read(d) for d in dirs]
    assert {m.cluster_id for m in metas} != {None} and len({m.cluster_id for m in metas}) == 1
    assert [m.node_id for m in metas] == [3, 3]
    assert metas[0].directory_id != metas[1].directory_id
    with LogManager(dirs, {}):  # and they are accepted at the next start
        pass


def test_the_manager_names_the_cluster_id_its_dirs_agree_on(tmp_path):
    props = real_props(KRAFT_META)
    a = make_dir(tmp_path / "a", props)
    with LogManager([a, tmp_path / "b"], {}) as manager:
        assert manager.cluster_id == props["cluster.id"]
        assert set(manager.meta_properties) == {a, tmp_path / "b"}


def test_reserved_directory_ids_are_kafkas():
    """DirectoryId.reserved: most significant bits 0 and least significant bits, a signed long, below 100."""
    import base64

    from kafkalog.logdir import is_reserved_directory_id, new_directory_id

    def uid(high: int, low: int) -> str:
        raw = high.to_bytes(8, "big") + low.to_bytes(8, "big")
        return base64.urlsafe_b64encode(raw).decode().rstrip("=")

    assert is_reserved_directory_id(uid(0, 0)) and is_reserved_directory_id(uid(0, 99))
    assert is_reserved_directory_id(uid(0, 1 << 63))  # negative as a Java long
    assert not is_reserved_directory_id(uid(0, 100)) and not is_reserved_directory_id(uid(1, 0))
    taken = {new_directory_id() for _ in range(50)}
    assert len(taken) == 50 and not any(is_reserved_directory_id(d) for d in taken)


def test_a_reserved_directory_id_is_refused(tmp_path):
    a = make_dir(tmp_path / "a", kraft_props(**{"directory.id": "AAAAAAAAAAAAAAAAAAAAAQ"}))
    error = refused([a])
    assert str(error) == f"Invalid resrved directory ID AAAAAAAAAAAAAAAAAAAAAQ found in {a}"  # Kafka's spelling


def test_cluster_metadata_in_two_dirs_is_refused(tmp_path):
    """KafkaRaftServer: __cluster_metadata-0 belongs to the one metadata log dir."""
    from kafkalog.errors import KafkaStorageError

    a = make_dir(tmp_path / "a", kraft_props())
    b = make_dir(tmp_path / "b", kraft_props())
    for d in (a, b):
        (d / "__cluster_metadata-0").mkdir()
    with pytest.raises(KafkaStorageError, match="Found unexpected metadata location in data directory"):
        LogManager([a, b], {}).startup()
    LogDirLock(a).acquire().release()
