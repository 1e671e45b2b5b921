"""The training form's section of a way-out page (and of ``patch``'s output): which form goes where, how to train with
the training form, which form it is (placed in the template's own branches, or computed and why), or why none is
offered.

Model-id independent, like the rest of a :class:`~tito_audit.formatters.fix_report.FixPage` (the file names are the
same for every model: ``chat_template.jinja`` serves, ``chat_template.training.jinja`` trains).
"""

from __future__ import annotations

from tito_audit.repair.training_form import TrainingForm

TRAINING_FILE = "chat_template.training.jinja"
"""The training form's file name in published diffs and on the pages."""

USE = (
    "`tokenizer.apply_chat_template(messages, tools=tools, chat_template=training_form, tokenize=True, "
    "return_dict=True, return_assistant_tokens_mask=True)` gives `input_ids` and `assistant_masks`: keep the loss "
    "where `assistant_masks` is 1 (TRL's SFT: `assistant_only_loss=True` with the training form as the tokenizer's "
    "chat template)"
)


def training_section(training: TrainingForm, patched: bool) -> list[str]:
    """Markdown lines; ``patched``: the serving form is the fix above (else the model's own template)."""
    serving = "the patched template above" if patched else "the model's own template"
    if not training.offered:
        return ["## Training form", "", f"None offered: {training.reason}.", ""]
    return [
        "## Training form",
        "",
        f"`{TRAINING_FILE}`: {serving} with `{{% generation %}}` … `{{% endgeneration %}}` around what the model "
        "samples in each assistant turn, from after the generation prompt through the stop token, for a trainer that "
        "needs an assistant mask (SFT with assistant-only loss, RL that re-renders for the training step). Verified: "
        f"it {training.evidence()}.",
        "",
        f"Form: {training.placement()}.",
        "",
        f"- **Serving** (vLLM, SGLang, llama.cpp, any inference engine): {serving}, without generation blocks: "
        "`{% generation %}` is a transformers extension that other Jinja engines refuse.",
        f"- **Training** (the trainer only): the training form. {USE}.",
        "",
    ]
