"""The Qt list models on their own, checked with Qt's model tester, and the SQLite history."""

from __future__ import annotations

from PySide6.QtCore import Qt

from app.api_types import CatalogModel
from app.conversations import ConversationStore, Sampling
from app.qt_models import (
    CatalogListModel, ConversationListModel, DownloadListModel, KeyRole, MessageListModel, ObjectRole,
    format_size,
)

CATALOG = [CatalogModel.from_api(e) for e in [  # as GET /hearth/catalog gives them
    {"id": "qwen3-0.6b", "name": "Qwen3 0.6B", "family": "qwen3", "default_quant": "Q4_K_M",
     "sizes": {"Q4_K_M": 484_000_000}, "license": "Apache-2.0"},
    {"id": "gemma-3-1b", "name": "Gemma 3 1B", "family": "gemma3", "default_quant": "Q4_K_M",
     "sizes": {"Q4_K_M": 806_000_000}, "license": "Gemma"},
    {"id": "llama-3.2-1b", "name": "Llama 3.2 1B", "family": "llama", "default_quant": "Q8_0",
     "sizes": {"Q8_0": 1_320_000_000}, "license": "Llama 3.2"},
]]


def test_conversation_model_follows_the_store(qtmodeltester, tmp_path):
    store = ConversationStore(tmp_path / "c.sqlite3")
    model = ConversationListModel()
    qtmodeltester.check(model)
    a = store.create("First")
    b = store.create("Second", model="gemma-3-270m", system_prompt="Be brief.",
                     sampling=Sampling(0.2, 0.9, 64, 3))
    model.reset(store.conversations())
    qtmodeltester.check(model)
    assert [model.index(i).data() for i in range(model.rowCount())] == ["Second", "First"]
    assert model.index(0).data(KeyRole) == b.id
    got = model.index(0).data(ObjectRole)
    assert (got.model, got.system_prompt, got.sampling) == ("gemma-3-270m", "Be brief.", Sampling(0.2, 0.9, 64, 3))
    store.add_message(a.id, "user", "hi")  # a new message moves its conversation to the top
    model.reset(store.conversations())
    assert model.index(0).data() == "First"
    store.close()


def test_message_model_rows_and_signals(qtmodeltester, qtbot, tmp_path):
    store = ConversationStore(tmp_path / "c.sqlite3")
    c = store.create()
    model = MessageListModel()
    qtmodeltester.check(model)
    with qtbot.waitSignal(model.rowsInserted):
        model.append(store.add_message(c.id, "user", "one"))
    model.append(store.add_message(c.id, "assistant", "two", {"model": "m"}))
    model.append(store.add_message(c.id, "user", "three"))
    qtmodeltester.check(model)
    m = model.item(1)
    m.content += " more"
    with qtbot.waitSignal(model.dataChanged) as sig:
        model.changed(m.id)
    assert sig.args[0].row() == 1 and model.index(1).data() == "two more"
    with qtbot.waitSignal(model.rowsRemoved) as sig:
        model.remove_from(1)
    assert (sig.args[1], sig.args[2]) == (1, 2)
    assert [x.content for x in model.items()] == ["one"]
    assert model.index(5).data() is None
    store.close()


def test_catalog_model_search(qtmodeltester):
    model = CatalogListModel()
    model.set_entries(CATALOG)
    qtmodeltester.check(model)
    assert model.rowCount() == 3
    model.set_query("gemma")
    assert [model.index(i).data(KeyRole) for i in range(model.rowCount())] == ["gemma-3-1b"]
    model.set_query("q4_k_m")
    assert {model.index(i).data(KeyRole) for i in range(model.rowCount())} == {"qwen3-0.6b", "gemma-3-1b"}
    model.set_query("apache")
    assert model.rowCount() == 1
    assert model.index(0).data(Qt.ItemDataRole.DisplayRole) == "Qwen3 0.6B · Q4_K_M · 484.0 MB"
    model.set_query("nothing like this")
    assert model.rowCount() == 0
    model.set_query("")
    assert model.rowCount() == 3


def test_download_model_upserts_by_id(qtmodeltester, qtbot):
    model = DownloadListModel()
    model.upsert({"id": "d1", "model": "x", "state": "queued"})
    qtmodeltester.check(model)
    with qtbot.waitSignal(model.dataChanged):
        model.upsert({"id": "d1", "model": "x", "state": "downloading", "done_bytes": 5})
    assert model.rowCount() == 1 and model.item(0)["state"] == "downloading"
    model.upsert({"id": "d2", "model": "y", "state": "queued"})
    assert model.rowCount() == 2
    model.remove("d1")
    assert [d["id"] for d in model.items()] == ["d2"]


def test_history_search_edit_and_delete(tmp_path):
    path = tmp_path / "c.sqlite3"
    store = ConversationStore(path)
    c = store.create("Trip")
    u = store.add_message(c.id, "user", "Where is Lisbon?")
    a = store.add_message(c.id, "assistant", "In Portugal.", {"model": "m", "tokens_per_s": 12.5})
    store.add_message(c.id, "user", "And Porto?")
    assert [x.id for x in store.conversations("lisbon")] == [c.id]
    assert store.conversations("madrid") == []
    store.delete_messages_from(c.id, a.id)
    u.content = "Where is Lisboa?"
    store.update_message(u)
    store.close()

    again = ConversationStore(path)
    assert [(m.role, m.content) for m in again.messages(c.id)] == [("user", "Where is Lisboa?")]
    again.delete(c.id)
    assert again.get(c.id) is None and again.messages(c.id) == []
    again.close()


def test_format_size():
    assert format_size(0) == "" and format_size(512) == "512 B"
    assert format_size(95_300_000) == "95.3 MB" and format_size(4_920_000_000) == "4.9 GB"
