"""Process one group: its PDFs concurrently, each one isolated from the others' failures."""

from __future__ import annotations

import asyncio

from pagegate.outcomes import GroupOutcome
from pagegate.pdf_job import process_pdf
from pagegate.planning import Group
from pagegate.run_context import RunContext


async def process_group(ctx: RunContext, group: Group) -> GroupOutcome:
    """All PDFs of the group at once; the admission gate decides how fast pages go out."""
    outcomes = await asyncio.gather(*(process_pdf(ctx, uri, group.id) for uri in group.uris))
    return GroupOutcome(group_id=group.id, pdfs=tuple(outcomes))
