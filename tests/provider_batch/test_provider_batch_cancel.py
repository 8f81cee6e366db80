"""Cancelling a provider batch that has already ended (an interrupted job whose batch
was answered meanwhile): the providers refuse with 409, which is no error."""

from __future__ import annotations

import json
import logging

import pytest
from pb_support import APIS, model_for

from raygent import UserMessage
from raygent.errors import ProviderError
from raygent.models import ModelOptions
from raygent.sim import Reply, Rule, serve


@pytest.mark.local_only("the batch API itself: no backend involved")
@pytest.mark.parametrize("api", APIS)
async def test_cancelling_a_batch_that_ended_is_not_an_error(
    api: str, caplog: pytest.LogCaptureFixture
) -> None:
    async with serve([Rule(reply=Reply(text="ok"))]) as sim:
        model = model_for(api, sim)
        batches = model.batch_api()
        body = model.request_body([UserMessage(content="hi")], ModelOptions(), stream=False)
        body.pop("stream", None)
        batch_id = await batches.submit([batches.encode("rg-1", json.dumps(body).encode())], "t")
        assert (await batches.state(batch_id)).ended  # the simulator answers at once
        with caplog.at_level(logging.WARNING):
            await batches.cancel(batch_id)  # 409 from OpenAI: the batch is completed
            await batches.cancel(batch_id)
        state = await batches.state(batch_id)
        with pytest.raises(ProviderError):  # a batch that does not exist is still one
            await batches.cancel("batch_no_such_one")
    assert state.ended and state.status in ("completed", "ended")
    assert not caplog.records
