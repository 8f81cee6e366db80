"""Amazon Bedrock's Converse API (and ConverseStream), signed with AWS Signature V4."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from typing_extensions import Unpack

from .._message_input import MessageLike
from ..errors import CapabilityError, ProviderError
from ..messages import Message
from ..pricing import lookup_pricing, price_usage
from ..usage import Usage
from . import _bedrock_wire as wire
from ._aws import AwsSigner, endpoint_url, resolve_region
from ._bedrock_batch import BedrockBatch, BedrockBatchAPI
from ._bedrock_stream import BedrockFeeder, EventStreamDecoder, as_reply
from ._errors import ErrorSaid
from ._http import HTTPModel
from ._settings import ModelSettings, refuse_unknown
from ._transport import Outgoing
from ._wire import Reply
from .contract import Capabilities, ModelOptions, Tier

if TYPE_CHECKING:
    from .batch_api import BatchAPI

__all__ = ["BedrockBatch", "BedrockModel", "BedrockSettings"]

BedrockTier = Literal["priority", "default", "flex", "reserved"]
# What Bedrock charges of the standard rates at its priority tier (a 75% premium), and
# at flex (half: the batch price), where neither genai-prices nor `pricing=` says.
PRIORITY_MULTIPLIER = 1.75
FLEX_MULTIPLIER = 0.5
# Claude models that think (extended thinking through additionalModelRequestFields).
_THINKING = re.compile(r"anthropic\.claude-(3-7|(opus|sonnet|haiku)-4|4)")
# Families whose Converse takes images and cache points (Claude, Nova); Bedrock's
# structured output (`outputConfig`) too.
_RICH = re.compile(r"(anthropic\.claude|amazon\.nova)")
# What a batch inference job of a model family takes besides messages (Converse jobs):
# raygent sends tool definitions and output schemas by batch only to these families;
# another's such line goes online (a refusal, typed, then the online request).
_BATCH_FIELDS = (
    ("toolConfig", re.compile(r"(anthropic\.claude|amazon\.nova)"), "tool definitions"),
    ("outputConfig", re.compile(r"anthropic\.claude"), "output schema"),
)


def _bedrock_said(headers: Mapping[str, str], body: Any) -> bool:
    """Whether an error reply is Bedrock's: its type named, or its body Bedrock's
    `{"message": ...}` (a proxy in front answers in its own shape)."""
    if headers.get("x-amzn-ErrorType") or headers.get("x-amzn-errortype"):
        return True
    return not isinstance(body, dict) or "message" in body or "__type" in body


class BedrockSettings(ModelSettings, total=False):
    """`ModelSettings`, and Bedrock's own: `region` (else `AWS_REGION`,
    `AWS_DEFAULT_REGION`, the profile's), `profile` (a shared-config profile for
    botocore's credential chain), `access_key` / `secret_key` / `session_token`
    (explicit credentials instead of the chain), `service_tier` ("priority",
    "default", "flex", "reserved", or `raygent.Tier("flex", fallback="default")`) and
    `guardrail` (a `guardrailConfig`: `{"guardrailIdentifier", "guardrailVersion",
    "trace"}`), `batch` (a `BedrockBatch`: the S3 location and IAM role of its batch
    inference jobs; None: no provider batches). `api_key` is a Bedrock API key (also
    `AWS_BEARER_TOKEN_BEDROCK`), sent as a bearer token instead of a signature."""

    region: str | None
    profile: str | None
    access_key: str | None
    secret_key: str | None
    session_token: str | None
    service_tier: BedrockTier | Tier | None
    guardrail: Mapping[str, Any] | None
    batch: BedrockBatch | None


class BedrockModel(HTTPModel):
    """A model on Amazon Bedrock through the Converse API.

    `model_id` is a foundation model's id (`anthropic.claude-...`, `amazon.nova-...`),
    a cross-region inference profile's (`us.anthropic.claude-...`) or an ARN.
    Credentials come from botocore's standard chain (environment, shared config and
    credentials files with `profile`, SSO, container and instance roles, refreshed
    before they expire) unless given; every request is signed with SigV4 over its
    body. The endpoint is the region's (`AWS_ENDPOINT_URL_BEDROCK_RUNTIME` or
    `base_url=` for another). `default_max_tokens` is sent when a request gives none.
    A reply is priced at the tier it names (genai-prices' `aws` ids, or `pricing=`).
    """

    provider = wire.PROVIDER
    env_key = ""  # signed, no key required
    default_base_url = ""
    prices_as = wire.PRICES_PROVIDER
    settings_type = BedrockSettings

    def __init__(
        self, model_id: str, *, default_max_tokens: int = 4096, **settings: Unpack[BedrockSettings]
    ) -> None:
        refuse_unknown(type(self), self.settings_type, settings)  # before the region's lookup
        region = resolve_region(settings.get("region"), settings.get("profile"))
        # Redacted from every error, as the API key is (read by `_secrets` in __init__).
        secrets = (settings.get("secret_key"), settings.get("session_token"))
        self._aws_secrets = tuple(s for s in secrets if s)
        given = cast("dict[str, Any]", dict(settings))
        if not given.get("base_url"):
            given["base_url"] = endpoint_url(region)
        super().__init__(model_id, **cast("ModelSettings", given))  # checked there in full
        self.region = region
        self.default_max_tokens = default_max_tokens
        self.service_tier = settings.get("service_tier")
        self.guardrail = dict(settings.get("guardrail") or {}) or None
        self.profile = settings.get("profile")
        self.access_key = settings.get("access_key")
        self.batch = settings.get("batch")
        self._signer = AwsSigner(
            region,
            profile=self.profile,
            access_key=self.access_key,
            secret_key=settings.get("secret_key"),
            session_token=settings.get("session_token"),
            bearer_token=self._api_key or None,
        )

    @classmethod
    def default_capabilities(cls, name: str) -> Capabilities:
        rich = bool(_RICH.search(name))
        return Capabilities(
            structured_output=rich,
            vision=rich,
            reasoning=bool(_THINKING.search(name)),
            prompt_caching=rich,
            image_urls=False,  # Bedrock fetches no URL: raygent downloads attachments
        )

    # -- identity: the account whose quotas hold, never a secret ----------------------

    @functools.cached_property
    def key_fingerprint(self) -> str:
        """A hash of the access key id when given, else of the profile (and region) the
        credential chain is read for, else of the API key."""
        who = self.access_key or (f"bearer:{self._api_key}" if self._api_key else None)
        who = who or f"profile:{self.profile or 'default'}:{self.region}"
        return hashlib.sha256(who.encode()).hexdigest()[:12]

    # -- the wire ------------------------------------------------------------------------

    def request_path(self, *, stream: bool) -> str:
        return wire.converse_path(self.name, stream=stream)

    def build_body(
        self, messages: Sequence[Message], options: ModelOptions, *, stream: bool
    ) -> dict[str, Any]:
        return wire.request_body(
            self.name,
            messages,
            options,
            self.capabilities,
            default_max_tokens=self.default_max_tokens,
            guardrail=self.guardrail,
        )

    def parse_reply(self, data: dict[str, Any]) -> Reply:
        return as_reply(wire.read_reply(data, model=self.name))

    def stream_decoder(self) -> EventStreamDecoder:
        return EventStreamDecoder()

    def stream_feeder(self) -> BedrockFeeder:
        return BedrockFeeder(self.name)

    async def sign(self, request: Outgoing) -> None:
        content = request.content or b""
        args = (request.method, request.url, request.headers, content)
        if self._signer.needs_lookup:
            # The chain reads files or a role's endpoint once: off the event loop.
            signed = await asyncio.to_thread(self._signer.sign, *args)
        else:
            signed = self._signer.sign(*args)
        request.headers.update(signed)

    def error_said(self, body: Any, headers: Mapping[str, str]) -> ErrorSaid:
        if not _bedrock_said(headers, body):
            return super().error_said(body, headers)
        given = headers.get("x-amzn-ErrorType") or headers.get("x-amzn-errortype")
        if not given and isinstance(body, dict):
            given = body.get("__type")
        code = str(given).split(":", 1)[0].rsplit("#", 1)[-1] if given else None
        if isinstance(body, dict):
            return ErrorSaid(code, str(body.get("message") or "") or None)
        return ErrorSaid(code, str(body), raw=True)

    def typed_error(
        self,
        status: int | None,
        headers: Mapping[str, str],
        body: Any,
        sent: dict[str, Any] | None,
    ) -> ProviderError | None:
        # Bedrock names its error's type (x-amzn-ErrorType, or the body's __type): the
        # wire maps each type (ModelNotReadyException is 429 but no rate; a
        # ServiceQuotaExceededException is 400 but a quota), redacted of the secrets.
        if status is None or not _bedrock_said(headers, body):
            return None  # a proxy's, in its own shape: the shared mapping
        raw = body.encode() if isinstance(body, str) else json.dumps(body).encode()
        return wire.error_from(status or None, headers, raw, secrets=self._secrets)

    @functools.cached_property
    def _secrets(self) -> tuple[str, ...]:
        return (*super()._secrets, *self._aws_secrets)

    def _priced(self, usage: Usage, *, batch: bool = False, tier: str | None = None) -> Usage:
        # Bedrock's priority costs more than its standard tier, unlike Anthropic's (the
        # shared default): its multipliers fill what the rates in use leave unset.
        if batch or tier not in ("priority", "flex"):
            return super()._priced(usage, batch=batch, tier=tier)
        rates = self.pricing
        if rates is None:
            tokens = usage.total_input_tokens
            standard = lookup_pricing(wire.PRICES_PROVIDER, self.name, tokens)
            tiered = lookup_pricing(wire.PRICES_PROVIDER, self.name, tokens, tier=tier)
            if standard is None or tiered != standard.for_tier(tier):
                return super()._priced(usage, batch=batch, tier=tier)  # unknown, or its own
            rates = standard
        update = {
            "priority_multiplier": rates.priority_multiplier or PRIORITY_MULTIPLIER,
            "flex_multiplier": rates.flex_multiplier or FLEX_MULTIPLIER,
        }
        return price_usage(
            usage,
            provider=wire.PRICES_PROVIDER,
            model=self.name,
            declared=rates.model_copy(update=update),
            tier=tier,
        )

    def batch_body(
        self, messages: Sequence[MessageLike], options: ModelOptions | None
    ) -> dict[str, Any]:
        """A batch inference record's `modelInput`: the Converse body, at the batch
        price (no service tier). CapabilityError (the line goes online) for tool
        definitions or an output schema the model's batch jobs do not take."""
        body = self.request_body(messages, options, stream=False)
        body.pop("serviceTier", None)
        for field, kinds, what in _BATCH_FIELDS:
            if field in body and not kinds.search(self.name):
                raise CapabilityError(
                    f"bedrock: a batch inference job of {self.name} takes no {what}: "
                    "the request goes online",
                    model=self.name,
                    capability=f"batch_{field}",
                )
        return body

    def batch_api(self) -> BatchAPI | None:
        """Batch inference (model invocation jobs) where `batch=` says where its records
        go (None: this model has no provider batches)."""
        if self.batch is None:
            return None
        api = self.__dict__.get("_batch_api")
        if api is None:
            api = self.__dict__["_batch_api"] = BedrockBatchAPI(self, self.batch)
        return api

    def aws_client(self, service: str, endpoint: str | None = None) -> Any:
        """A botocore client of `service` with this model's credentials and region
        (`endpoint`: another than botocore's own configuration); blocking calls."""
        from botocore.session import Session

        keys = self._signer._keys
        return Session(profile=self.profile).create_client(
            service,
            region_name=self.region,
            endpoint_url=endpoint,
            aws_access_key_id=keys[0],
            aws_secret_access_key=keys[1],
            aws_session_token=keys[2],
        )

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()
        state.pop("_batch_api", None)  # its S3 client stays in this process
        return state
