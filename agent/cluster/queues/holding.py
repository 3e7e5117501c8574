"""Queue preemption that places: the room a reclaim makes is held for its pending pod by a
placeholder pod until the victims are gone, then handed to the pod (pure: plain data in,
intents out; ``agent/cluster/acting.py`` writes them).

Why. A pending pod that needs two victims of its own priority never ran on the real
scheduler when it was merely nominated (``status.nominatedNodeName``) to their node: when
the first victim is gone the scheduler retries the pod, it still does not fit, its own
preemption finds nothing it may take (equal priority) and it *clears* the nomination
(kube-scheduler v1.37.2, ``framework/preemption/preemption.go``: "Specify
nominatedNodeName to clear the pod's nominatedNodeName status"); the room then goes to
whoever is tried next (another pending pod, the victims' replacements).

What (DESIGN.md "placeholder pod", as the migrator's reservations): a pause container with
the pending pod's requests and tolerations, in the controller's namespace, pinned to the
node by a required node affinity on ``metadata.name`` (never ``spec.nodeName``: the
scheduler binds it, so it takes room only where its accounting says there is room),
``preemptionPolicy: Never``, labelled ``qos.waterline.io/reclaim-for: <pending pod uid>``
and ``qos.waterline.io/created-by: queues`` (how leftovers are found).

One round of a reclaim's life (``step``):

1. *Held*: the plan gives a pending pod a node and victims. The PriorityClass is ensured,
   the placeholder created, nominated to the node, and only then are the victims evicted.
   A placeholder with ``preemptionPolicy: Never`` keeps an external nomination when a try
   fails (its preemption is not even attempted: the scheduler's nominating mode stays
   Noop), and the scheduler counts a nominated pod of equal or higher priority as already
   on its node for every other pod it places (``addGENominatedPods``): the victims'
   room is held against other pending pods and the victims' replacements from the moment
   the first victim goes. The pending pod is *not* nominated meanwhile (the scheduler
   would count it against its own placeholder).
2. *Handed over*: the placeholder is bound to the node (the victims' room is all there).
   The pending pod is nominated to the node; once a later snapshot shows the nomination
   standing, the pod is re-read from the API server and, only if it is still nominated
   there (``confirmed``: every try of the pod while the placeholder is bound fails and
   clears it, and any pod deletion in the cluster starts one), the placeholder is deleted
   with no grace period: one deletion frees the pod's whole room at once, so the pod's
   next try fits, and until then its nomination holds the room against every pod of no
   higher priority. The pod is re-read once more right after, and nominated again at once
   if a try begun before the deletion cleared it (``renominate``).
3. *Ended*: the pod is bound (``placed`` on the node, or ``elsewhere``), gone (``gone``),
   or a deadline passed: the placeholder not bound within ``hold_seconds`` (``expired``:
   a victim that does not leave, a node that went away), the pod not bound within
   ``handoff_seconds`` of its claim or of the hand-over (``unplaced``; the deadlines are
   at least a few controller rounds). Its placeholder is deleted on
   every path; the pod may be given a new reclaim by a later plan.

Decisions where DESIGN.md is silent:

* One placeholder per reclaim, the pending pod's shape, not one per victim: nominated
  placeholders of one priority count each other as on the node, so per-victim ones bind
  only once every victim is gone (they hold no earlier than one), and handing k of them
  over takes k deletions, between which the pending pod is retried, fails, and loses its
  nomination (the very waste the placeholder is for). The pod's own shape also holds the
  node's slack in the resources the victims do not free.
* Priority: the pending pod's (its value, through a PriorityClass
  ``waterline-reclaim-<value>`` with ``preemptionPolicy: Never`` that the controller
  creates; a pod may not set preemptionPolicy against its class, so the pod's own class
  cannot be used). Equal, not just below it: a pod of the pending pod's priority (the
  starving queue's next pod, say) may then not preempt the placeholder, nor pass it by
  the scheduler's nomination rule. Values are clamped to what a user class may hold.
* One held reclaim a node at a time: the plan does not count a pending placeholder, so a
  second one on the node could be planned into the same room, and the two nominated
  placeholders would wait on each other until both expire. The next pod's reclaim comes
  in the round after the hand-over (the plan then sees the first pod there).
* The controller's memory of its holds is the state (``Hold``); a placeholder that no
  hold of this controller knows (left by a stopped leader, or after a restart) is deleted,
  as are ``waterline-reclaim-*`` PriorityClasses no placeholder uses.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from agent.cluster.migrator.args import DEFAULT_PLACEHOLDER_IMAGE
from agent.cluster.migrator.placeholder import (
    MAX_PRIORITY,
    MIN_PRIORITY,
    bounded,
    never_preempting_class,
    pinned_pause_spec,
)
from agent.cluster.queues.reclaim import Reclaim
from agent.defaults import CONTROLLER_LEASE_NAMESPACE
from agent.model import migration as m
from agent.model.objects import Pod

CREATED_BY = "queues"
#: The pending pod a placeholder holds room for, by uid (a label: leftovers are found by it).
RECLAIM_LABEL = "qos.waterline.io/reclaim-for"
#: The pending pod (namespace/name) and the victims, for whoever reads the placeholder.
POD_ANNOTATION = "qos.waterline.io/reclaim-pod"
VICTIMS_ANNOTATION = "qos.waterline.io/reclaim-victims"
PRIORITY_CLASS_PREFIX = "waterline-reclaim-"

# outcomes of a reclaim (``Ended.outcome``, the ``waterline_controller_reclaims`` label)
PLACED = "placed"
ELSEWHERE = "elsewhere"
GONE = "gone"
EXPIRED = "expired"
UNPLACED = "unplaced"
OUTCOMES = (PLACED, ELSEWHERE, GONE, EXPIRED, UNPLACED)
#: The Event of a hand-over (withdrawn with it when the pod's nomination is found gone).
HANDED = "ReclaimHandedOver"


@dataclass(frozen=True, slots=True)
class HoldArgs:
    """Where placeholders live and what they run (the migrator's settings), and the
    deadlines of a hold."""

    namespace: str = CONTROLLER_LEASE_NAMESPACE
    image: str = DEFAULT_PLACEHOLDER_IMAGE
    #: From the evictions to the placeholder bound on the node.
    hold_seconds: float = 120.0
    #: From the pod's claim to its nomination seen standing, and from the hand-over to
    #: the pod bound.
    handoff_seconds: float = 60.0

    def for_interval(self, interval: float) -> HoldArgs:
        """Deadlines of at least a few controller rounds (each step waits for one)."""
        return replace(self, hold_seconds=max(self.hold_seconds, 4 * interval),
                       handoff_seconds=max(self.handoff_seconds, 3 * interval))  # fmt: skip


@dataclass(frozen=True, slots=True)
class Hold:
    """A reclaim in progress: the room its victims free is held on ``node`` for ``pod``."""

    pod: str
    uid: str
    node: str
    victims: tuple[str, ...]
    #: The placeholder, namespace/name.
    placeholder: str
    priority_class: str
    started: float
    #: When the pod was nominated to the node, its placeholder bound (None: not yet).
    claimed: float | None = None
    #: When the room was handed to the pod (None: still held by the placeholder).
    handed_over: float | None = None


@dataclass(frozen=True, slots=True)
class Note:
    """An Event on the pending pod."""

    pod: str
    type: str
    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Ended:
    hold: Hold
    outcome: str
    #: Where the pod was bound ("" unless placed or elsewhere).
    node: str = ""


@dataclass(frozen=True, slots=True)
class Start:
    """A new hold: create ``body`` (after the class), nominate it to the node, then evict."""

    hold: Hold
    body: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Intents:
    #: The holds after this round (the controller's memory).
    holds: Mapping[str, Hold] = field(default_factory=dict)
    priority_classes: tuple[Mapping[str, Any], ...] = ()
    starts: tuple[Start, ...] = ()
    #: (pod key, node): pending pods handed their room, placeholders whose nomination
    #: went; in order, before ``delete``.
    nominate: tuple[tuple[str, str], ...] = ()
    delete: tuple[Pod, ...] = ()
    #: Placeholders whose room is handed over: deleted at once (no grace period), after
    #: ``nominate``.
    hand_over: tuple[Pod, ...] = ()
    #: The pods whose hand-over starts this round (their placeholder in ``hand_over``):
    #: the shell re-reads each just before and ``confirmed`` keeps only those whose
    #: nomination still stands.
    handing: tuple[str, ...] = ()
    delete_classes: tuple[str, ...] = ()
    notes: tuple[Note, ...] = ()
    ended: tuple[Ended, ...] = ()
    #: Reclaims of the plan not started, and why (pod key -> reason).
    deferred: Mapping[str, str] = field(default_factory=dict)


def is_queue_placeholder(pod: Pod, namespace: str) -> bool:
    """One of ours: in the controller's namespace, with the reclaim label *and*
    ``created-by: queues`` (a user's pod that merely carries the label is never ours)."""
    return (
        pod.namespace == namespace
        and RECLAIM_LABEL in pod.labels
        and pod.labels.get(m.CREATED_BY_LABEL) == CREATED_BY
    )


def placeholder_priority(pod: Pod) -> int:
    return max(MIN_PRIORITY, min(MAX_PRIORITY, pod.priority))


def priority_class_name(value: int) -> str:
    return f"{PRIORITY_CLASS_PREFIX}{value}"


def priority_class_body(value: int) -> dict[str, Any]:
    return never_preempting_class(
        priority_class_name(value),
        value,
        CREATED_BY,
        "Waterline queue preemption placeholders: the priority of the pods "
        "they hold room for; never preempt. Deleted by the controller when unused.",
    )


def placeholder_name(pod: Pod, node: str, now: float) -> str:
    """Unique per hold (a new hold for the same pod may come while the last one's
    placeholder is still terminating)."""
    digest = hashlib.sha256(f"{pod.uid}/{node}/{now!r}".encode()).hexdigest()[:10]
    return bounded(f"reclaim-{pod.name}", 242) + f"-{digest}"


def placeholder_body(hold: Hold, pod: Pod, args: HoldArgs) -> dict[str, Any]:
    """The placeholder of ``hold``: ``pod``'s requests and tolerations, for the scheduler
    to bind to ``hold.node`` (and no other)."""
    namespace, name = hold.placeholder.split("/", 1)
    value = placeholder_priority(pod)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {RECLAIM_LABEL: pod.uid, m.CREATED_BY_LABEL: CREATED_BY},
            "annotations": {
                POD_ANNOTATION: pod.key,
                VICTIMS_ANNOTATION: ",".join(hold.victims),
            },
        },
        "spec": pinned_pause_spec(
            hold.node,
            priority_class=hold.priority_class,
            priority=value,
            tolerations=pod.tolerations,
            requests=pod.requests,
            image=args.image,
        ),
    }


def planned(reclaim: Reclaim, pod: Pod, now: float, args: HoldArgs) -> Start:
    """The hold a reclaim starts, and its placeholder (also what simulate shows)."""
    value = placeholder_priority(pod)
    hold = Hold(
        pod=pod.key,
        uid=pod.uid,
        node=reclaim.node,
        victims=tuple(reclaim.victims),
        placeholder=f"{args.namespace}/{placeholder_name(pod, reclaim.node, now)}",
        priority_class=priority_class_name(value),
        started=now,
    )
    return Start(hold, placeholder_body(hold, pod, args))


def step(
    holds: Mapping[str, Hold],
    reclaims: Sequence[Reclaim],
    pods: Mapping[str, Pod],
    priority_classes: Mapping[str, int],
    now: float,
    args: HoldArgs,
) -> Intents:
    """One round: the holds carried on (handed over, ended), the plan's new reclaims
    started, leftovers collected."""
    ours = {p.key: p for p in pods.values() if is_queue_placeholder(p, args.namespace)}
    kept: dict[str, Hold] = {}
    nominate: list[tuple[str, str]] = []
    delete: dict[str, Pod] = {}
    hand_over: list[Pod] = []
    handing: list[str] = []
    notes: list[Note] = []
    ended: list[Ended] = []

    def end(hold: Hold, outcome: str, node: str = "") -> None:
        holder = ours.get(hold.placeholder)
        if holder is not None and not holder.is_terminating:
            delete[holder.key] = holder
        ended.append(Ended(hold, outcome, node))
        if outcome == GONE:
            return  # no pod to tell
        kind, why = _ENDINGS[outcome]
        notes.append(Note(hold.pod, kind, why, _ended_message(hold, outcome, node)))

    for key, hold in holds.items():
        pod = pods.get(key)
        holder = ours.get(hold.placeholder)
        if pod is None or pod.uid != hold.uid:
            end(hold, GONE)
        elif pod.node_name:
            end(hold, PLACED if pod.node_name == hold.node else ELSEWHERE, pod.node_name)
        elif hold.handed_over is not None:
            if now - hold.handed_over > args.handoff_seconds:
                end(hold, UNPLACED)
                continue
            if pod.nominated_node != hold.node:
                nominate.append((key, hold.node))  # the scheduler cleared it: renewed
            if holder is not None and not holder.is_terminating:
                hand_over.append(holder)  # its deletion failed: again
            kept[key] = hold
        elif holder is not None and holder.node_name == hold.node and not holder.is_terminating:
            if hold.claimed is not None and now - hold.claimed > args.handoff_seconds:
                end(hold, UNPLACED)  # its nomination never stood long enough
                continue
            if hold.claimed is None or pod.nominated_node != hold.node:
                # first the pod's claim, seen to stand a round later, then the room
                nominate.append((key, hold.node))
                kept[key] = replace(hold, claimed=hold.claimed or now)
                continue
            hand_over.append(holder)
            handing.append(key)
            kept[key] = replace(hold, handed_over=now)
            notes.append(Note(key, "Normal", HANDED,
                              f"the room on {hold.node} held by {hold.placeholder} is the "
                              f"pod's: nominated there, placeholder deleted"))  # fmt: skip
        elif now - hold.started > args.hold_seconds:
            end(hold, EXPIRED)
        else:
            if holder is not None and not holder.node_name and holder.nominated_node != hold.node:
                nominate.append((holder.key, hold.node))
            kept[key] = hold

    held = {h.placeholder for h in kept.values()}
    for holder in ours.values():
        if holder.key not in held and not holder.is_terminating:
            delete.setdefault(holder.key, holder)  # a leftover, or one whose hold ended

    busy = {h.node for h in kept.values() if h.handed_over is None}
    starts: list[Start] = []
    deferred: dict[str, str] = {}
    for reclaim in reclaims:
        pod = pods.get(reclaim.pod)
        if reclaim.pod in kept or pod is None or pod.node_name or not reclaim.victims:
            continue
        if reclaim.node in busy:
            deferred[reclaim.pod] = f"NodeHeld {reclaim.node}"
            continue
        start = planned(reclaim, pod, now, args)
        starts.append(start)
        kept[reclaim.pod] = start.hold
        busy.add(reclaim.node)
        notes.append(Note(reclaim.pod, "Normal", "ReclaimHeld",
                          f"room on {reclaim.node} held by {start.hold.placeholder} while "
                          f"its victims leave: {', '.join(reclaim.victims)}"))  # fmt: skip

    wanted = {s.hold.priority_class for s in starts}
    create = tuple(priority_class_body(placeholder_priority(pods[s.hold.pod]))
                   for s in starts if s.hold.priority_class not in priority_classes)  # fmt: skip
    gone = set(delete) | {p.key for p in hand_over}
    used = wanted | {p.priority_class_name for p in ours.values() if p.key not in gone}
    stale = tuple(
        sorted(n for n in priority_classes if n.startswith(PRIORITY_CLASS_PREFIX) and n not in used)
    )
    return Intents(
        holds=kept,
        priority_classes=tuple({b["metadata"]["name"]: b for b in create}.values()),
        starts=tuple(starts),
        nominate=tuple(nominate),
        delete=tuple(delete.values()),
        hand_over=tuple(hand_over),
        handing=tuple(handing),
        delete_classes=stale,
        notes=tuple(notes),
        ended=tuple(ended),
        deferred=deferred,
    )


def stands(hold: Hold, pod: Pod | None) -> bool:
    """``pod`` (a fresh read of the hold's pending pod; None: gone) is still the hold's,
    unbound and nominated to its node."""
    return (
        pod is not None
        and pod.uid == hold.uid
        and not pod.node_name
        and pod.nominated_node == hold.node
    )


def confirmed(intents: Intents, fresh: Mapping[str, Pod | None]) -> Intents:
    """The hand-overs of ``intents`` that may go ahead, given the pending pods re-read just
    before (``fresh``: pod key -> the pod, None if it is gone; a key missing: it could not
    be read).

    Why. The snapshot that showed a pod's nomination standing is a round old by the time
    the placeholder would be deleted, and every try of the pod meanwhile fails (the
    placeholder still holds its room), finds nothing to preempt and clears the nomination
    (kube-scheduler v1.37.2 ``framework/preemption/preemption.go`` ``evaluate``: no
    candidate, ``NewPostFilterResultWithNominatedNode("")``; ``handleSchedulingFailure``
    writes it on the informer's latest copy of the pod, so a nomination written after the
    try began is cleared too). Any pod deletion in the cluster starts such a try. Deleting
    the placeholder then would free the room to a pod that nothing holds it for: the
    outsider or a victim's replacement of the same priority takes it, and every victim is
    wasted. So a hand-over whose pod is no longer nominated there is not made: the pod is
    nominated again, and the hold stays claimed (its ``handoff_seconds`` from the claim
    still bound the retries). One that could not be read waits a round; one whose pod is
    gone or bound waits for ``step`` to end it."""
    if not intents.handing:
        return intents
    holds = dict(intents.holds)
    nominate = list(intents.nominate)
    withdrawn: set[str] = set()
    for key in intents.handing:
        hold = holds[key]
        if key in fresh and stands(hold, fresh[key]):
            continue
        withdrawn.add(key)
        holds[key] = replace(hold, handed_over=None)
        pod = fresh.get(key)
        if pod is not None and pod.uid == hold.uid and not pod.node_name:
            nominate.append((key, hold.node))
    if not withdrawn:
        return intents
    placeholders = {holds[k].placeholder for k in withdrawn}
    return replace(
        intents,
        holds=holds,
        nominate=tuple(nominate),
        hand_over=tuple(p for p in intents.hand_over if p.key not in placeholders),
        handing=tuple(k for k in intents.handing if k not in withdrawn),
        notes=tuple(n for n in intents.notes if not (n.pod in withdrawn and n.reason == HANDED)),
    )


def renominate(hold: Hold, pod: Pod | None) -> bool:
    """Whether the pod, re-read right after its placeholder was deleted, must be nominated
    again at once: a try that began before the deletion (the placeholder still counted)
    fails and clears the nomination after it; the room is then free and held for nobody
    until the pod's next try, so the claim is renewed now, not a round later."""
    return pod is not None and pod.uid == hold.uid and not pod.node_name and not stands(hold, pod)


_ENDINGS = {
    PLACED: ("Normal", "ReclaimPlaced"),
    ELSEWHERE: ("Normal", "ReclaimPlacedElsewhere"),
    EXPIRED: ("Warning", "ReclaimExpired"),
    UNPLACED: ("Warning", "ReclaimUnplaced"),
}


def _ended_message(hold: Hold, outcome: str, node: str) -> str:
    victims = ", ".join(hold.victims)
    return {
        PLACED: f"bound to {node}, where its victims ({victims}) were chosen",
        ELSEWHERE: f"bound to {node}, not {hold.node} where its victims ({victims}) were chosen",
        EXPIRED: f"the room on {hold.node} was not all free after the victims ({victims}) "
        "were evicted; placeholder deleted",
        UNPLACED: f"not bound after the room on {hold.node} was handed over",
    }[outcome]
