"""Queue preemption holds the room it makes (``agent/cluster/queues/holding.py``): one
placeholder per reclaim, shaped as the pending pod, pinned to the node, nominated there
before the victims go; handed over (pod nominated, then placeholder deleted) once bound and
its nomination seen standing; every path ends with the placeholder deleted; leftovers and unused classes collected."""

from __future__ import annotations

from dataclasses import replace

from agent.cluster.queues import Reclaim
from agent.cluster.queues import holding as h
from agent.model.objects import Pod
from agent.model.objects.pods import Toleration

ARGS = h.HoldArgs(namespace="waterline-system", image="pause:test", hold_seconds=120,
                  handoff_seconds=60)  # fmt: skip
NOW = 1000.0
WIDE = Pod("team", "wide", "uid-wide", phase="Pending", priority=100,
           requests={"cpu": 2.0, "memory": 1e9, "example.com/gpu": 1.0, "pods": 1.0},
           tolerations=(Toleration("pool", "Equal", "a", "NoSchedule"),))  # fmt: skip
VICTIMS = (Pod("team", "v1", "uid-v1", node_name="n1"), Pod("team", "v2", "uid-v2", node_name="n1"))
RECLAIM = Reclaim("team/wide", "n1", ("team/v1", "team/v2"))


def pods(*extra: Pod) -> dict[str, Pod]:
    return {p.key: p for p in (WIDE, *VICTIMS, *extra)}


def started() -> tuple[h.Hold, Pod]:
    """A hold just started, and its placeholder as the API shows it (pending)."""
    intents = h.step({}, [RECLAIM], pods(), {}, NOW, ARGS)
    (start,) = intents.starts
    meta = start.body["metadata"]
    holder = Pod(meta["namespace"], meta["name"], "uid-ph", phase="Pending", labels=meta["labels"],
                 priority=100, priority_class_name=start.hold.priority_class)  # fmt: skip
    return start.hold, holder


def test_a_reclaim_starts_a_hold_whose_placeholder_is_the_pod_pinned_to_the_node() -> None:
    intents = h.step({}, [RECLAIM], pods(), {}, NOW, ARGS)
    (start,) = intents.starts
    hold, body = start.hold, start.body
    assert (hold.pod, hold.node, hold.victims, hold.started) == ("team/wide", "n1", RECLAIM.victims, NOW)
    assert hold.placeholder.startswith("waterline-system/reclaim-wide-")
    spec = body["spec"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms == {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}  # fmt: skip
    assert "nodeName" not in spec  # the scheduler binds it, with its own checks
    assert (spec["priorityClassName"], spec["priority"], spec["preemptionPolicy"]) == (
        "waterline-reclaim-100", 100, "Never")  # fmt: skip
    assert spec["containers"][0]["resources"] == {
        "requests": {"cpu": "2000m", "example.com/gpu": "1", "memory": "1000000000"},
        "limits": {"example.com/gpu": "1"},
    }
    assert spec["containers"][0]["image"] == "pause:test"
    assert spec["tolerations"] == [{"key": "pool", "operator": "Equal", "value": "a", "effect": "NoSchedule"}]
    assert body["metadata"]["labels"] == {h.RECLAIM_LABEL: "uid-wide", "qos.waterline.io/created-by": "queues"}
    assert body["metadata"]["annotations"][h.VICTIMS_ANNOTATION] == "team/v1,team/v2"
    # its PriorityClass: the pod's value, never preempting
    (cls,) = intents.priority_classes
    assert (cls["metadata"]["name"], cls["value"], cls["preemptionPolicy"]) == ("waterline-reclaim-100", 100, "Never")
    assert intents.holds == {"team/wide": hold}
    assert [(n.reason, n.pod) for n in intents.notes] == [("ReclaimHeld", "team/wide")]
    # a class that exists is not created again
    assert h.step({}, [RECLAIM], pods(), {"waterline-reclaim-100": 100}, NOW, ARGS).priority_classes == ()


def test_priority_is_clamped_to_what_a_user_class_may_hold() -> None:
    critical = replace(WIDE, priority=2_000_001_000)
    (start,) = h.step({}, [RECLAIM], pods(critical), {}, NOW, ARGS).starts
    assert start.body["spec"]["priority"] == 1_000_000_000


def test_while_held_no_new_victims_and_a_lost_nomination_is_renewed() -> None:
    hold, holder = started()
    # the plan gives the pod other victims: it is held already
    again = Reclaim("team/wide", "n2", ("team/x",))
    intents = h.step({hold.pod: hold}, [again], pods(holder), {}, NOW + 5, ARGS)
    assert intents.starts == () and intents.holds == {hold.pod: hold}
    assert intents.nominate == ((holder.key, "n1"),) and intents.delete == ()
    nominated = replace(holder, nominated_node="n1")
    assert h.step({hold.pod: hold}, [], pods(nominated), {}, NOW + 5, ARGS).nominate == ()


def test_a_bound_placeholder_hands_the_room_to_the_pod_once_its_nomination_stands() -> None:
    hold, holder = started()
    bound = replace(holder, node_name="n1", phase="Running")
    # first the pod's claim
    intents = h.step({hold.pod: hold}, [], pods(bound), {}, NOW + 8, ARGS)
    assert intents.nominate == (("team/wide", "n1"),) and intents.delete == intents.hand_over == ()
    claimed = replace(hold, claimed=NOW + 8)
    assert intents.holds == {hold.pod: claimed}
    # a try that failed just before cleared it: claimed again, the room kept
    intents = h.step({hold.pod: claimed}, [], pods(bound), {}, NOW + 9, ARGS)
    assert intents.nominate == (("team/wide", "n1"),) and intents.hand_over == ()
    assert intents.holds == {hold.pod: claimed}
    # seen standing: the placeholder goes at once, and it is no leftover
    standing = replace(WIDE, nominated_node="n1")
    intents = h.step({hold.pod: claimed}, [], pods(standing, bound), {}, NOW + 10, ARGS)
    assert intents.nominate == () and intents.delete == () and intents.hand_over == (bound,)
    assert intents.holds == {hold.pod: replace(claimed, handed_over=NOW + 10)}
    assert [n.reason for n in intents.notes] == ["ReclaimHandedOver"]
    # a nomination that never stands: given up once the hand-over's deadline passed
    late = h.step({hold.pod: claimed}, [], pods(bound), {}, NOW + 8 + 61, ARGS)
    assert [e.outcome for e in late.ended] == [h.UNPLACED] and late.delete == (bound,)


def test_a_hand_over_goes_ahead_only_if_the_pods_nomination_still_stands_when_re_read() -> None:
    hold, holder = started()
    bound = replace(holder, node_name="n1", phase="Running")
    claimed = replace(hold, claimed=NOW + 8)
    standing = replace(WIDE, nominated_node="n1")
    intents = h.step({hold.pod: claimed}, [], pods(standing, bound), {}, NOW + 10, ARGS)
    assert intents.handing == ("team/wide",) and intents.hand_over == (bound,)
    # re-read just before: still nominated there, the hand-over is made as planned
    assert h.confirmed(intents, {"team/wide": standing}) == intents
    # a try that failed since the snapshot cleared it: nominated again, the room kept
    again = h.confirmed(intents, {"team/wide": WIDE})
    assert again.hand_over == () and again.handing == () and again.delete == ()
    assert again.nominate == (("team/wide", "n1"),)
    assert again.holds == {hold.pod: claimed}
    assert [n.reason for n in again.notes] == []
    # nominated elsewhere (by the scheduler's own preemption, say): the same
    assert h.confirmed(intents, {"team/wide": replace(WIDE, nominated_node="n2")}) == again
    # not read (an API error): no hand-over, no nomination, the next round decides
    unread = h.confirmed(intents, {})
    assert unread.hand_over == unread.nominate == () and unread.holds == {hold.pod: claimed}
    # gone, or bound meanwhile: no hand-over; the next round ends the hold
    for fresh in (None, replace(WIDE, node_name="n2"), replace(standing, uid="uid-other")):
        out = h.confirmed(intents, {"team/wide": fresh})
        assert out.hand_over == out.nominate == () and out.holds == {hold.pod: claimed}
    # a hand-over retried (its deletion failed) is not re-checked
    handed = replace(claimed, handed_over=NOW + 10)
    retry = h.step({hold.pod: handed}, [], pods(standing, bound), {}, NOW + 11, ARGS)
    assert retry.handing == () and h.confirmed(retry, {}) == retry


def test_right_after_the_hand_over_a_cleared_nomination_is_renewed_at_once() -> None:
    hold, _ = started()
    standing = replace(WIDE, nominated_node="n1")
    assert not h.renominate(hold, standing)
    assert h.renominate(hold, WIDE)  # a try begun before the deletion cleared it
    assert h.renominate(hold, replace(WIDE, nominated_node="n2"))
    assert not h.renominate(hold, replace(WIDE, node_name="n1"))  # bound: done
    assert not h.renominate(hold, None)
    assert not h.renominate(hold, replace(WIDE, uid="uid-other"))


def test_the_deadlines_are_a_few_rounds_at_least() -> None:
    assert h.HoldArgs().for_interval(0.3) == h.HoldArgs()
    slow = h.HoldArgs().for_interval(60)
    assert (slow.hold_seconds, slow.handoff_seconds) == (240, 180)


def test_after_the_hand_over_the_pod_bound_ends_the_hold() -> None:
    hold, holder = started()
    handed = replace(hold, handed_over=NOW + 8)
    leaving = replace(holder, node_name="n1", deletion_time=NOW + 8)
    # not bound yet, its nomination cleared by a failed try: renewed
    intents = h.step({hold.pod: handed}, [], pods(leaving), {}, NOW + 9, ARGS)
    assert intents.nominate == (("team/wide", "n1"),) and intents.delete == ()
    placed = replace(WIDE, node_name="n1")
    intents = h.step({hold.pod: handed}, [], pods(placed, leaving), {}, NOW + 10, ARGS)
    assert intents.holds == {} and intents.delete == ()  # already leaving
    assert [(e.outcome, e.node) for e in intents.ended] == [(h.PLACED, "n1")]
    assert [(n.type, n.reason) for n in intents.notes] == [("Normal", "ReclaimPlaced")]
    # not bound in time after the hand-over: given up (a later plan may try again)
    late = h.step({hold.pod: handed}, [], pods(leaving), {}, NOW + 8 + 61, ARGS)
    assert [e.outcome for e in late.ended] == [h.UNPLACED] and late.holds == {}


def test_every_other_ending_deletes_the_placeholder() -> None:
    hold, holder = started()
    held = {hold.pod: hold}
    cases = {
        h.ELSEWHERE: (pods(replace(WIDE, node_name="n2"), holder), NOW + 5),
        h.GONE: ({holder.key: holder}, NOW + 5),
        h.EXPIRED: (pods(holder), NOW + 121),
    }
    for outcome, (seen, now) in cases.items():
        intents = h.step(held, [], seen, {}, now, ARGS)
        assert [e.outcome for e in intents.ended] == [outcome], outcome
        assert intents.delete == (holder,) and intents.holds == {}, outcome
    recreated = replace(WIDE, uid="uid-other")  # same name, another pod
    assert [e.outcome for e in h.step(held, [], pods(recreated, holder), {}, NOW, ARGS).ended] == [h.GONE]


def test_one_held_reclaim_a_node_at_a_time() -> None:
    """The plan does not count a pending placeholder: two on a node could wait on each
    other. The second waits for the first's hand-over."""
    other = Pod("team", "other", "uid-other", phase="Pending", requests={"cpu": 1.0})
    both = [RECLAIM, Reclaim("team/other", "n1", ("team/v3",)), Reclaim("team/third", "n2", ("team/v4",))]
    third = Pod("team", "third", "uid-third", phase="Pending")
    intents = h.step({}, both, pods(other, third), {}, NOW, ARGS)
    assert [s.hold.pod for s in intents.starts] == ["team/wide", "team/third"]
    assert intents.deferred == {"team/other": "NodeHeld n1"}
    hold, holder = started()
    handed = replace(hold, handed_over=NOW + 8)
    later = h.step({hold.pod: handed}, both[1:2], pods(other), {}, NOW + 9, ARGS)
    assert [s.hold.pod for s in later.starts] == ["team/other"]


def test_leftovers_and_unused_classes_are_collected_and_nothing_else() -> None:
    _, holder = started()  # a placeholder no hold knows: a restart, a stopped leader
    users = replace(holder, namespace="team", name="mine")  # the label, elsewhere
    unlabelled = replace(holder, name="theirs", labels={h.RECLAIM_LABEL: "x"})
    leaving = replace(holder, name="leaving", deletion_time=NOW)
    classes = {"waterline-reclaim-100": 100, "waterline-reclaim-7": 7, "waterline-reservation-9": 9,
               "high": 1000}  # fmt: skip
    intents = h.step({}, [], pods(holder, users, unlabelled, leaving), classes, NOW, ARGS)
    assert intents.delete == (holder,)
    # the terminating placeholder still uses its class; the migrator's are not ours
    assert intents.delete_classes == ("waterline-reclaim-7",)
