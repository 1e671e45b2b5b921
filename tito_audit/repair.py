"""Patch a model's template and verify the patch: audit before, propose the mechanical fixes, audit after with
the same settings, and prove that renders the fixes must not touch are byte-identical."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from tito_audit.audit_options import AuditOptions
from tito_audit.errors import BadInputError
from tito_audit.generate import generate
from tito_audit.model import LoadedModel, codec_for
from tito_audit.patching import NoChangeProof, Patch, propose_patch, prove_no_change
from tito_audit.render import Renderer, frozen_clock
from tito_audit.results import READY, READY_TOOL_ONLY, AuditReport
from tito_audit.variants import jinja_environment

AuditRunner = Callable[[LoadedModel, AuditOptions], AuditReport]


@dataclass
class PatchOutcome:
    before: AuditReport
    patch: Patch
    causes: list[str]
    """Every cause the audit before found (checks and findings)."""
    after: AuditReport | None = None
    """The audit of the patched template (None when no fix applied)."""
    proof: NoChangeProof | None = None

    @property
    def good(self) -> bool:
        """The patched template reaches a good verdict and changes nothing the fixes must not touch."""
        return (
            self.after is not None
            and self.proof is not None
            and self.after.verdict in (READY, READY_TOOL_ONLY)
            and self.proof.holds
        )


def patch_and_verify(loaded: LoadedModel, options: AuditOptions, run_audit: AuditRunner) -> PatchOutcome:
    """Audit ``loaded``, patch its template for the causes found, audit the patch the same way, and compare
    the renders of both templates on the generated conversations."""
    if loaded.template_source is None:
        raise BadInputError(
            f"{loaded.resolved.model_id} renders through {loaded.backend}: there is no template to patch"
        )
    before = run_audit(loaded, options)
    causes = sorted(
        {c for v in before.variants for c in v.checks["rollout"].cause_counts}
        | {f.cause for v in before.variants for f in v.findings}
    )
    patch = propose_patch(loaded.template_source, causes, jinja_environment(), options.clock)
    outcome = PatchOutcome(before=before, patch=patch, causes=causes)
    if not patch.changed:
        return outcome
    patched = replace(loaded, template_source=patch.patched, template_origin="patched", template_name=None)
    outcome.after = run_audit(patched, options)
    codec = codec_for(loaded)
    original_renderer, patched_renderer = Renderer(loaded, codec), Renderer(patched, codec)
    conversations = list(generate(options.count, options.seed, options.max_turns))
    with frozen_clock(loaded.template_source, options.clock), frozen_clock(patch.patched, options.clock):
        outcome.proof = prove_no_change(conversations, original_renderer.text, patched_renderer.text)
    return outcome
