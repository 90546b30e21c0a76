"""More than one node, the parts that need no boot: both copies of a journal merged, the relay
over a real torch TCPStore (the kind vLLM's rank 0 hosts), node identity and per-node summaries
in the report, the rank another node reported dead, and the multi-node helpers."""

from __future__ import annotations

import io
import json
import time
from types import SimpleNamespace

import pytest
from factories import config, rank_journal, write_journal

from kvaudit.assemble import assemble
from kvaudit.config import AuditConfig
from kvaudit.engines.journal import RELAY_DIR, JournalTailer, read_journals
from kvaudit.engines.process import Finished
from kvaudit.engines.vllm import multinode
from kvaudit.engines.vllm.supervise import RunOutcome, rank_events
from kvaudit.errors import BadInputError
from kvaudit.render import Format, reporter
from kvaudit.render.summary import binding_note, capacity_lines, node_lines
from kvaudit.schema import FailureKind, Phase, Verdict, dumps
from kvaudit.validate import report_from_json


def run(folder, stop=None, code=0):
    """The report node 0's supervisor makes of a journal folder (both copies of each journal)."""
    sources: dict[int, str] = {}
    events = rank_events({}, folder, sources)
    finished = Finished(stop=stop, exit_code=code, survivors=[], elapsed_s=1.0)
    return assemble(RunOutcome(config(tensor_parallel_size=2), {}, events, "", finished, timeout_s=600.0,
                               sources=sources).record())


def where(rank: int, node: int, ip: str) -> dict:
    return {"type": "fact", "host": "box", "node_ip": ip, "node_rank": node, "local_rank": 0, "device_index": rank}


def two_node_folder(tmp_path, rank1_events):
    folder = tmp_path / "journal"
    (folder / RELAY_DIR).mkdir(parents=True)
    write_journal(folder, 0, rank_journal(0)[:1] + [where(0, 0, "10.0.0.1")] + rank_journal(0)[1:])
    write_journal(folder / RELAY_DIR, 1, rank1_events)
    return folder


def rank1(events):
    return events[:1] + [where(1, 1, "10.0.0.2")] + events[1:]


def test_read_journals_takes_the_longer_copy_and_says_where_it_came_from(tmp_path):
    folder = tmp_path / "journal"
    (folder / RELAY_DIR).mkdir(parents=True)
    write_journal(folder, 0, rank_journal(0))
    write_journal(folder / RELAY_DIR, 0, rank_journal(0, upto=Phase.LOAD))   # the relay is behind
    write_journal(folder / RELAY_DIR, 1, rank_journal(1, upto=Phase.LOAD))   # only the relay has rank 1
    (folder / "rank1.relay.jsonl").write_text("{}\n")                        # not a rank file
    sources: dict[int, str] = {}
    got = read_journals(folder, sources)
    assert {r: (len(e), sources[r]) for r, e in got.items()} == {
        0: (len(rank_journal(0)), "file"), 1: (len(rank_journal(1, upto=Phase.LOAD)), "relay")}


def test_the_tailer_delivers_each_event_once_from_whichever_copy_has_it_first(tmp_path):
    folder = tmp_path / "journal"
    (folder / RELAY_DIR).mkdir(parents=True)
    events = rank_journal(1, upto=Phase.PROFILE)
    write_journal(folder / RELAY_DIR, 1, events[:3])
    tailer = JournalTailer(folder)
    first = tailer.poll()
    write_journal(folder, 1, events)                       # the file copy catches up and passes it;
    # the rank died before it published its last event: its node's marker follows fewer events
    write_journal(folder / RELAY_DIR, 1, events[:-1] + [{"type": "died", "rank": 1, "signal": "SIGKILL"}])
    second = tailer.poll()
    assert [e for _, e in first + second] == events + [{"type": "died", "rank": 1, "signal": "SIGKILL"}]
    assert tailer.stopped == {1: {"type": "died", "rank": 1, "signal": "SIGKILL"}}


def test_a_rank_killed_on_another_node_is_the_failure_with_its_phase_and_node(tmp_path):
    # GIVEN rank 1 (node 1) died in profile: its node appended a died marker; rank 0 then failed
    # in profile on the broken collective
    died = {"t": 2e9, "type": "died", "rank": 1, "signal": "SIGKILL", "exit_code": None, "host": "box"}
    folder = two_node_folder(tmp_path, rank1(rank_journal(1, died_in=Phase.PROFILE)) + [died])
    failed = rank_journal(0, failed=Phase.PROFILE, error="RuntimeError: Connection closed by peer")
    write_journal(folder, 0, failed[:1] + [where(0, 0, "10.0.0.1")] + failed[1:])
    rep = run(folder, stop=FailureKind.WORKER_DIED, code=-15)
    assert rep.failure is not None and rep.verdict is Verdict.UNKNOWN
    assert (rep.failure.kind, rep.failure.rank, rep.failure.phase) == (FailureKind.WORKER_DIED, 1, Phase.PROFILE)
    assert rep.failure.message.startswith("rank 1 on node 1, host box died in profile (killed by SIGKILL)")
    assert [(r.node.node_rank, r.node.ip, r.node.journal) for r in rep.ranks] == [(0, "10.0.0.1", "file"),
                                                                                   (1, "10.0.0.2", "relay")]


def test_a_lost_rank_names_its_silence(tmp_path):
    lost = {"t": 2e9, "type": "lost", "rank": 1, "silent_s": 21.5}
    folder = two_node_folder(tmp_path, rank1(rank_journal(1, upto=Phase.LOAD)) + [lost])
    rep = run(folder, stop=FailureKind.WORKER_DIED, code=-15)
    assert (rep.failure.rank, rep.failure.phase) == (1, Phase.PROFILE)   # it finished load: lost before profile
    assert "was lost in profile: its heartbeat in vLLM's distributed store stopped for 21.5 s" in rep.failure.message


def test_nodes_in_the_report_round_trip_and_render(tmp_path):
    # GIVEN a complete two-node boot where rank 1 has less KV
    folder = two_node_folder(tmp_path, rank1(rank_journal(1, kv_available=40 * 2**30)))
    rep = run(folder)
    assert rep.capacity.binding_rank == 1
    assert [(n.node_rank, n.ranks, n.binding_rank) for n in rep.nodes] == [(0, (0,), 0), (1, (1,), 1)]
    assert all(n.others_bytes is not None for n in rep.nodes)
    back = report_from_json(json.loads(dumps(rep)))
    assert back.nodes == rep.nodes and [r.node for r in back.ranks] == [r.node for r in rep.ranks]
    kv_line = dict(capacity_lines(back))["KV available"]
    assert " on rank 1 (node 1) = " in kv_line
    assert binding_note(back).startswith("* the binding rank (1, on node 1)")
    lines = node_lines(back)
    assert lines[1].startswith("node 1 (box, 10.0.0.2): ranks 1; least KV on rank 1 (40.00 GiB)")
    assert lines[1].endswith("← binds") and not lines[0].endswith("← binds")
    # both human formats draw them, through the one sequence of sections (render/sections.py)
    for fmt in (Format.TABLE, Format.MARKDOWN):
        out = io.StringIO()
        reporter(fmt, width=200, color=False).report(back, out)
        assert all(line in out.getvalue() for line in lines), fmt


def test_a_single_node_report_keeps_its_old_rendering(tmp_path):
    folder = tmp_path / "journal"
    folder.mkdir()
    write_journal(folder, 0, rank_journal(0))
    write_journal(folder, 1, rank_journal(1))
    rep = run(folder)
    assert rep.nodes is None                 # the ranks did not say where they ran
    assert "nodes" not in json.loads(dumps(rep))
    assert binding_note(rep) == "* the binding rank (0): it has the least KV, and every rank of its engine allocates its block count"


def test_a_bad_node_record_is_one_line(tmp_path):
    folder = two_node_folder(tmp_path, rank1(rank_journal(1)))
    data = json.loads(dumps(run(folder)))
    data["ranks"][1]["node"]["journal"] = "carrier pigeon"
    with pytest.raises(BadInputError, match=r"^report\.ranks\[1\]\.node\.journal: expected rpc, file, relay"):
        report_from_json(data)
    data["ranks"][1]["node"]["journal"] = "relay"
    data["nodes"][0]["ranks"] = ["0"]
    with pytest.raises(BadInputError, match=r"^report\.nodes\[0\]\.ranks: expected a list of integers$"):
        report_from_json(data)


def _edit_node(index, key, value):
    def edit(nodes):
        nodes[index][key] = value
    return edit


@pytest.mark.parametrize("edit, pattern", [
    (_edit_node(1, "node_rank", 0), r"^report\.nodes\[1\]\.node_rank: node 0 appears twice \(nodes\[0\] is node 0 "
                                    r"too\)$"),
    (_edit_node(0, "ranks", [0, 1]), r"^report\.nodes\[1\]\.ranks\[0\]: rank 1 is already in nodes\[0\]\.ranks: a "
                                     r"rank runs on one node$"),
    (_edit_node(0, "ranks", [5]), r"^report\.nodes\[0\]\.ranks\[0\]: names rank 5, but no entry of ranks is rank 5$"),
    (_edit_node(0, "binding_rank", 1), r"^report\.nodes\[0\]\.binding_rank: names rank 1, which is not one of this "
                                       r"node's ranks$"),
])
def test_nodes_that_name_ranks_or_nodes_wrongly_are_one_line(tmp_path, edit, pattern):
    # GIVEN a two-node report (node 0 holds rank 0, node 1 rank 1) with one node entry edited
    folder = two_node_folder(tmp_path, rank1(rank_journal(1, kv_available=40 * 2**30)))
    data = json.loads(dumps(run(folder)))
    edit(data["nodes"])
    with pytest.raises(BadInputError, match=pattern):
        report_from_json(data)


def test_multinode_helpers():
    cfg = AuditConfig(tensor_parallel_size=8, extra_args={"pipeline_parallel_size": 2, "nnodes": 2, "node_rank": 1})
    assert multinode.local_world_size(cfg) == 8 and multinode.node_rank(cfg) == 1
    pcp = AuditConfig(tensor_parallel_size=2, decode_context_parallel_size=2,
                      extra_args={"prefill_context_parallel_size": 2})
    assert multinode.local_world_size(pcp) == 4   # vLLM's world size: tp × pp × pcp; DCP adds no rank
    assert multinode.node_rank(AuditConfig(extra_args={"node_rank": True})) == 0
    ray = AuditConfig(extra_args={"distributed_executor_backend": "ray"})
    assert "cpu platform has no Ray executor" in multinode.refusal(ray, SimpleNamespace(device_name="cpu",
                                                                                         ray_device_key=""))
    assert multinode.refusal(ray, SimpleNamespace(device_name="cuda", ray_device_key="GPU")) is None


def test_the_relay_over_a_real_tcp_store(tmp_path, monkeypatch):
    torch_dist = pytest.importorskip("torch.distributed")
    from kvaudit.engines.vllm import transport
    monkeypatch.setenv("KVAUDIT_LOST_AFTER_S", "1")
    server = torch_dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    address = ("127.0.0.1", server.port)
    folder = tmp_path / "journal"
    folder.mkdir()
    monkeypatch.setenv("KVAUDIT_JOURNAL_DIR", str(tmp_path / "on-another-node"))   # no such folder here
    journal = transport.RankJournal(1)
    assert journal.path is None                     # no file, and no failure for the missing folder
    journal.write({"type": "start", "phase": "baseline"})   # before the store: buffered
    journal.attach(transport.StoreStream(transport.connect(address)))
    journal.write({"type": "phase", "name": "baseline", "status": "ok"})
    relay = transport.Relay(transport.StoreStream(transport.connect(address)), folder, [1, 2])
    relay.pull()
    copied = [json.loads(line) for line in (folder / RELAY_DIR / "rank1.jsonl").read_text().splitlines()]
    assert [e["type"] for e in copied] == ["start", "phase"] and copied == journal.events
    # rank 2 never beat, and rank 1 is released: only rank 2 is lost after the second
    journal.release()
    time.sleep(1.3)
    relay.pull()
    assert [e["type"] for e in read_journals(folder)[1]] == ["start", "phase", "released"]
    lost = read_journals(folder)[2]
    assert [e["type"] for e in lost] == ["lost"] and lost[0]["silent_s"] >= 1


def test_a_partial_report_still_says_where_each_rank_ran(tmp_path):
    died = {"t": 2e9, "type": "died", "rank": 1, "signal": "SIGKILL", "exit_code": None}
    folder = two_node_folder(tmp_path, rank1(rank_journal(1, died_in=Phase.PROFILE)) + [died])
    write_journal(folder, 0, rank_journal(0, died_in=Phase.PROFILE)[:1] + [where(0, 0, "10.0.0.1")]
                  + rank_journal(0, died_in=Phase.PROFILE)[1:])
    rep = run(folder, stop=FailureKind.WORKER_DIED, code=-15)
    assert rep.capacity.binding_rank is None
    assert binding_note(rep) is None
    assert node_lines(rep) == [
        f"node {n}{ip}: ranks {n}; least KV on rank — (—); others {o}; physical headroom {h}"
        for n, ip, o, h in ((0, " (box, 10.0.0.1)", "1.00 GiB", "8.00 GiB"), (1, " (box, 10.0.0.2)", "1.00 GiB", "8.00 GiB"))]
