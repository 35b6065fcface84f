r"""Membership inference: does a deployed model reveal whether a record was among the private data?

Why this exists
===============
The empirical audit (:mod:`dpmtv.audit.mechanism`) bounds the release mechanism's ε; this module
shows the *consequence* a user sees: an attacker who queries the adapted model with a record and
guesses from the answer whether that record was one of the private demonstrations. It runs the
same attack against

- ``icl``: plain many-shot in-context learning, the private records (the *members*) sitting in
  the prompt as demonstrations — the non-private way to use them;
- ``dp-mtv``: the model with a DP-MTV task vector built from the same members
  (:func:`dpmtv.pipeline.build.build_task_vector` with the given
  :class:`~dpmtv.pipeline.build.BuildSettings`),
  queried zero-shot through :func:`dpmtv.inference.apply` (the hooks a deployment uses);
- ``zero-shot``: the bare model, which never saw any member — the chance reference (its AUC
  differs from 0.5 only by sampling noise, which shows how large that noise is);
- ``mtv`` (optional, NON-PRIVATE control): the same build without noise. It separates what the
  noise hides from what a single shared vector cannot carry in the first place.

Attack
======
A *query* is a record's image(s) and question; the *score* is the model's log-probability of the
record's own answer, summed over its tokens (teacher forcing, the negative loss — Yeom et al.
2018): ``log p(answer | query)`` with the zero-shot prompt (``zero-shot``, ``dp-mtv``, ``mtv``)
or with the query appended after the many-shot prompt that holds the members (``icl``). Members
and non-members are drawn from one distribution, so a score that separates them can only do so
through what the target learned from the members. A second statistic, ``calibrated``, subtracts
the same record's zero-shot score (a reference model that saw no member; the per-example
difficulty calibration of Watson et al. 2022 / LiRA-offline with the base model as reference): it
removes how plausible the answer is from the image alone and keeps what the private data added.
A third, ``shadow`` (optional: it needs public records of the same distribution), subtracts the
record's score under a *shadow target* built exactly like the attacked one from public records
instead of the members — the ICL prompts refilled with public records in the same group sizes, the
vector rebuilt (noise included) from as many public records: the offline reference-model attack of
LiRA (Carlini et al. 2022) with one shadow. It cancels what any target of that kind does to the
record (e.g. whether its random label happens to agree with the task the prompt implies), which the
zero-shot reference cannot know.

With a vector, the answer's tokens are scored as generation would produce them: the prompt is
run once (the vector patches its last position), then each answer token is fed with the KV cache
and patched in turn (in every-call mode) — exactly what :func:`dpmtv.inference.apply`, in its default
mode for the checkpoint, does while decoding.

Designing records whose membership matters
==========================================
If every answer follows from the image (a clean task), a model that learned the task scores a
non-member as high as a member and no attack can succeed, private or not. Membership becomes
observable when a record's answer can only be known from the record itself, so we randomise
labels: with probability ``label_noise`` a record's answer is redrawn uniformly from a
vocabulary (the task's answer words, or every answer word of the embedded family), independent
of its image; ``label_noise = 1`` makes every answer pure noise, so *any* advantage over chance
is leakage of the member set. Members and non-members are labelled the same way.

Two properties of the build bound what the ``dp-mtv``/``mtv`` attack can see at all: records the
partition leaves unused (``N mod s``) are effectively non-members (reported as
``members_unused_by_partition``), and with ``query="record"`` one record per chunk enters only
through its image (its answer is withheld). And a head set that overwrites every head of every
layer at the last position makes the patched model's output independent of the query image, so
its scores depend on the answer word alone — choose heads that leave the model reading its input.

How ICL prompts are cut
=======================
The members are shuffled and split into as few prompts as the context allows
(``icl_shots`` caps the demonstrations per prompt): each member is queried after the prompt that
contains it, each non-member after one of the prompts (round robin). With one prompt this is the
deployment "all private records in one many-shot prompt".

Metrics
=======
ROC AUC (Mann–Whitney, ties counted one half) with a stratified percentile bootstrap interval;
TPR at a low FPR (default 1%), the largest TPR of a threshold test ``score >= t`` whose FPR does
not exceed it — with ``n`` non-members the smallest non-zero FPR is ``1/n``, so for ``n < 100``
"TPR at 1% FPR" is the TPR at zero false positives (the report says which FPR was achieved);
and a one-sided Mann–Whitney p-value against "no member advantage".

What this is not
================
The report is not differentially private: it holds per-record scores and statistics of the
private records. Run it on data you may analyse (the embedded generator needs none).
"""

from dpmtv.audit.membership.attack import AttackSettings, run_membership_attack
from dpmtv.audit.membership.data import (
    MembershipData,
    embedded_membership_data,
    randomise_labels,
)
from dpmtv.audit.membership.metrics import (
    AttackMetrics,
    attack_metrics,
    bootstrap_auc_interval,
    roc_auc,
    roc_curve,
    tpr_at_fpr,
)
from dpmtv.audit.membership.report import MembershipReport
from dpmtv.audit.membership.scoring import answer_log_probs, answer_token_ids
from dpmtv.audit.membership.targets import STATISTICS, TargetScores, statistic_scores
from dpmtv.pipeline.public_clip import public_clip_norms  # re-exported: the attack's --l2-clip-norm auto

__all__ = [
    "STATISTICS",
    "AttackMetrics",
    "AttackSettings",
    "MembershipData",
    "MembershipReport",
    "TargetScores",
    "answer_log_probs",
    "answer_token_ids",
    "attack_metrics",
    "bootstrap_auc_interval",
    "embedded_membership_data",
    "public_clip_norms",
    "randomise_labels",
    "roc_auc",
    "roc_curve",
    "run_membership_attack",
    "statistic_scores",
    "tpr_at_fpr",
]
