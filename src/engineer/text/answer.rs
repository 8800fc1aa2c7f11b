//! The answer formats an engineer prompt ends with, one per kind of answer a
//! [`TextRevision`] asks for.
use super::TextRevision;

/// The answer format of `text` for a context whose failure breakdown is shown or not
/// (`breakdown`).
pub fn format(text: TextRevision, breakdown: bool) -> &'static str {
    if text.whole_configuration && breakdown {
        whole()
    } else if text.compact && breakdown {
        compact()
    } else if text.breakdown_last {
        evidence_last(breakdown)
    } else if text.evidence_first {
        evidence_first()
    } else {
        values()
    }
}

/// The first answer format (whatever modules are on). One regular shape: each size
/// changed with its three values, in a fenced block. Partial sizes, prose around the
/// JSON and wrapper keys are still read by `engineer::reply::extract`; the JSON Schema
/// of a proposal is in `schemas/config-proposal.json`, not in the prompt (a small
/// in-process model pays for every token of it and large models need no schema for
/// three numbers).
fn values() -> &'static str {
    "## Answer\nA ```json block {\"sizes\": {\"N\": {\"data_ratio\": x, \"hole_ratio\": y, \"wait_ratio\": z}}} \
with each size you change and its three values, then one short paragraph of rationale.\n"
}

/// [`TextRevision::breakdown_last`]'s answer format, followed by the breakdown
/// (weakest last): the evidence-first answer, its lines taken from the breakdown below
/// it.
fn evidence_last(breakdown: bool) -> &'static str {
    if breakdown {
        "## Answer\nFor each size you change, one line: `N: failed/total failed, mostly KIND: the change, FIELD old -> new`, \
taken from its line of the failure breakdown below (the weakest size is its last line). Then a ```json block {\"sizes\": {\"N\": {\"FIELD\": new}}} with only the values you change.\n\n"
    } else {
        evidence_first()
    }
}

/// [`TextRevision::evidence_first`]'s answer format: the evidence first, then the
/// proposal. Each changed size gets one line copied from its breakdown line (size,
/// failed count, main failure) with the change, and the JSON names only the values
/// that change (a size not named, and a value not named, keeps its setting).
/// Reasoning before the answer is how LLMs are asked to work, and for a small
/// in-process model every decision it writes is then a copy of text it has just read.
fn evidence_first() -> &'static str {
    "## Answer\nFor each size you change, one line: `N: failed/total failed, mostly KIND: the change, FIELD old -> new`, \
taken from its breakdown line. Then a ```json block {\"sizes\": {\"N\": {\"FIELD\": new}}} with only the values you change.\n"
}

/// [`TextRevision::compact`]'s answer format: the evidence-first answer in one line.
fn compact() -> &'static str {
    "Answer: copy the line of each size you change as `N: failed/total failed, mostly KIND: change, FIELD old -> new`, \
then ```json {\"sizes\": {\"N\": {\"FIELD\": new}}}.\n"
}

/// [`TextRevision::whole_configuration`]'s answer format: the compact answer, with the
/// change either at every size (`all`) or at the size the line names.
fn whole() -> &'static str {
    "Answer: copy the line of the size you read as `N: failed/total failed, mostly KIND: change, FIELD old -> new`, \
then ```json {\"all\": {\"FIELD\": new}}``` to change every size, or ```json {\"sizes\": {\"N\": {\"FIELD\": new}}}``` to change that size.\n"
}
