"""Triton's trace settings: the global setting, per-model overrides, and their updates.

The one place for the rules of `/v2/trace/setting`, `/v2/models/{m}/trace/setting` and
the gRPC `TraceSetting` RPC, as Triton 2.51's TraceManager has them (src/tracer.cc):

- a model's setting mirrors the global one for each field it does not specify; a field
  set to null (HTTP) or to no value (gRPC) stops being specified and follows the global
  one again; a model that specifies nothing has no setting of its own;
- a global field cleared the same way goes back to what the server started with;
- an update builds a new setting object (its sample counters start over); requests
  being traced keep the object they were sampled with;
- a setting that would trace nothing is refused unless its level is OFF ("sample rate
  must be non-zero", "trace file name is not given").

Numbers arrive as strings and are read as C++ `std::stoi` reads them (leading blanks,
a sign, digits, anything after ignored), then stored in Triton's field types (rate and
log_frequency unsigned 32-bit: "-1" becomes 4294967295).
"""

from __future__ import annotations

import itertools
import threading

from naiad.errors import Internal, InvalidArgument, Unsupported

LEVEL_OFF = 0
LEVEL_TIMESTAMPS = 1 << 2  # TRITONSERVER_TRACE_LEVEL_TIMESTAMPS
LEVEL_TENSORS = 1 << 3  # TRITONSERVER_TRACE_LEVEL_TENSORS

MODE_TRITON = "triton"
MODE_OPENTELEMETRY = "opentelemetry"

_FIELDS = ("level", "rate", "count", "log_frequency")
# The numeric settings: (the protocol's member name, the Setting field it sets).
_NUMBER_SETTINGS = (
    ("trace_rate", "rate"),
    ("trace_count", "count"),
    ("log_frequency", "log_frequency"),
)
_UINT32 = 1 << 32
_INT32_MIN, _INT32_MAX = -(1 << 31), (1 << 31) - 1


def level_names(level: int) -> list[str]:
    if level == LEVEL_OFF:
        return ["OFF"]
    names = []
    if level & LEVEL_TIMESTAMPS:
        names.append("TIMESTAMPS")
    if level & LEVEL_TENSORS:
        names.append("TENSORS")
    return names


def parse_level_list(values: list) -> int | None:
    """The level a request's `trace_level` list names; None when it names none that
    Triton knows (then the level is left as it was, as Triton does)."""
    level = None
    for value in values:
        if value == "OFF":
            if len(values) != 1:
                raise InvalidArgument("Expect only one trace level 'OFF' is specified")
            level = LEVEL_OFF
        elif value == "TIMESTAMPS":
            level = (level or 0) | LEVEL_TIMESTAMPS
        elif value == "TENSORS":
            level = (level or 0) | LEVEL_TENSORS
    return level


def stoi(text: str) -> int:
    """C++ std::stoi: ValueError when no number starts the text, OverflowError out of
    the int range."""
    i, n = 0, len(text)
    while i < n and text[i] in " \t\n\v\f\r":
        i += 1
    start = i
    if i < n and text[i] in "+-":
        i += 1
    digits = i
    while i < n and "0" <= text[i] <= "9":
        i += 1
    if i == digits:
        raise ValueError(text)
    value = int(text[start:i])
    if not _INT32_MIN <= value <= _INT32_MAX:
        raise OverflowError(text)
    return value


def parse_number(name: str, text: str, grpc: bool = False) -> int:
    """A numeric setting from its string, with Triton's messages (HTTP and gRPC word
    the trace_count floor slightly differently)."""
    try:
        value = stoi(text)
    except ValueError:
        raise InvalidArgument(f"Unable to parse '{name}', got: {text}") from None
    except OverflowError:
        low, high = (-1, _INT32_MAX) if name == "trace_count" else (0, _UINT32 - 1)
        raise InvalidArgument(
            f"Unable to parse '{name}', value is out of range [ {low}, {high} ], got: {text}"
        ) from None
    if name == "trace_count":
        if value < -1:
            sep = " " if grpc else ""
            raise InvalidArgument(
                f"Unable to parse 'trace_count'. Expecting value >= -1, got:{sep}{text}"
            )
        return value
    return value % _UINT32  # stored unsigned, as Triton's uint32_t


_SAMPLER_IDS = itertools.count(1)


class Setting:
    """One effective setting: what a request sampled under it is traced with. The
    sampler's counters live here (a new object starts them over)."""

    def __init__(self, level, rate, count, log_frequency, file, mode, config, specified=()):
        self.level = level
        self.rate = rate
        self.count = count
        self.log_frequency = log_frequency
        self.file = file  # a TraceFile (trace_file.py), shared by settings naming one path
        self.mode = mode
        self.config = config  # [(key, value)] of the mode's --trace-config options
        self.specified = frozenset(specified)
        self.invalid_reason = ""
        if level == LEVEL_OFF:
            self.invalid_reason = "tracing is disabled"
        elif rate == 0:
            self.invalid_reason = "sample rate must be non-zero"
        elif mode == MODE_TRITON and not file.path:
            self.invalid_reason = "trace file name is not given"
        self._lock = threading.Lock()
        # The C++ sampler's id for this setting (KServeCodec::set_trace_rate): the models
        # it applies to count their requests together; a new setting counts from 0.
        self.sampler = next(_SAMPLER_IDS) & 0xFFFFFFFF
        self.sampled = 0  # requests offered to the sampler
        self.collected = 0  # traces written
        self._stream: list[bytes] = []  # traces not written to the file yet

    @property
    def active(self) -> bool:
        return not self.invalid_reason and self.count != 0

    def sample(self) -> bool:
        """Triton's SampleTrace: every rate-th request, until count reaches 0."""
        if not self.active:
            return False
        self.sampled += 1
        if self.sampled % self.rate != 0:
            return False
        if self.count > 0:
            self.count -= 1
        return True

    def admit(self) -> bool:
        """trace_count applied to a request the C++ sampler picked (it applies the rate:
        KServeCodec::sample_trace). It picks every rate-th request, so Triton's count of
        requests offered stands at the next multiple of the rate."""
        if not self.active:
            return False
        self.sampled += self.rate
        if self.count > 0:
            self.count -= 1
        return True

    def write(self, trace_json: bytes) -> None:
        """Triton's WriteTrace: a finished trace joins the stream; the stream goes to an
        indexed file when log_frequency traces are in it, or when trace_count traces
        were all collected."""
        with self._lock:
            self._stream.append(trace_json)
            self.collected += 1
            full = (self.count == 0 and self.collected == self.sampled) or (
                self.log_frequency != 0 and len(self._stream) >= self.log_frequency
            )
            if not full:
                return
            chunk, self._stream = self._stream, []
        self.file.save(chunk, indexed=True)

    def close(self) -> None:
        """The setting is gone (replaced, or the server stops): what is left is saved,
        to an indexed file when log_frequency is set, else to the trace file."""
        with self._lock:
            chunk, self._stream = self._stream, []
        if chunk and self.mode == MODE_TRITON:
            self.file.save(chunk, indexed=self.log_frequency != 0)

    def to_json(self) -> dict:
        out = {
            "trace_level": level_names(self.level),
            "trace_rate": str(self.rate),
            "trace_count": str(self.count),
        }
        if self.mode == MODE_TRITON:
            out["log_frequency"] = str(self.log_frequency)
            out["trace_file"] = self.file.path
        out["trace_mode"] = self.mode
        for key, value in self.config:
            if key not in ("file", "log-frequency"):
                out[key] = str(value)
        return out


class Update:
    """What a request changes: a field's new value, or its clearing (null / no value)."""

    def __init__(self):
        self.values: dict[str, int] = {}
        self.cleared: set[str] = set()


def update_from_json(document) -> Update:
    """An HTTP body's update; errors as Triton words them (non-strings are Internal)."""
    update = Update()
    if not isinstance(document, dict):
        return update
    if "trace_file" in document:
        raise Unsupported("trace file location can not be updated through network protocol")
    if "trace_level" in document:
        levels = document["trace_level"]
        if levels is None:
            update.cleared.add("level")
        elif not isinstance(levels, list):
            raise Internal("attempt to access JSON non-array as array")
        else:
            if any(not isinstance(value, str) for value in levels):
                raise Internal("attempt to access JSON non-string as string")
            level = parse_level_list(levels)
            if level is not None:
                update.values["level"] = level
    for member, field in _NUMBER_SETTINGS:
        if member not in document:
            continue
        value = document[member]
        if value is None:
            update.cleared.add(field)
        elif not isinstance(value, str):
            raise Internal("attempt to access JSON non-string as string")
        else:
            update.values[field] = parse_number(member, value)
    return update


def update_from_grpc(settings) -> Update:
    """A TraceSettingRequest's update (map of name -> SettingValue{repeated value})."""
    update = Update()
    if "trace_file" in settings:
        raise Unsupported("trace file location can not be updated through network protocol")
    if "trace_level" in settings:
        values = list(settings["trace_level"].value)
        if not values:
            update.cleared.add("level")
        else:
            level = parse_level_list(values)
            if level is not None:
                update.values["level"] = level
    for member, field in _NUMBER_SETTINGS:
        if member not in settings:
            continue
        values = list(settings[member].value)
        if not values:
            update.cleared.add(field)
        elif len(values) == 1:
            update.values[field] = parse_number(member, values[0], grpc=True)
        else:
            raise InvalidArgument(f"expect only 1 value for '{member}'")
    return update


class TraceSettings:
    """The global setting, its start-up default and the models' overrides."""

    def __init__(self, default: Setting, on_change=None):
        self._default = default
        self.global_setting = _derive(default, None, Update(), default.file)
        self.models: dict[str, Setting] = {}
        self._retired: list[Setting] = []
        self._on_change = on_change  # called after every change (the manager's fast check)

    def get(self, model: str = "") -> Setting:
        return self.models.get(model, self.global_setting) if model else self.global_setting

    @property
    def any_active(self) -> bool:
        return self.global_setting.active or any(s.active for s in self.models.values())

    def update(self, model: str, update: Update) -> None:
        if model:
            self._update_model(model, update)
        else:
            self._replace_global(_derive(self._default, self.global_setting, update, None))
            for name in list(self.models):
                self._update_model(name, Update())
        if self._on_change is not None:
            self._on_change()

    def _update_model(self, model: str, update: Update) -> None:
        current = self.models.get(model)
        setting = _derive(self.global_setting, current, update, None)
        if not setting.specified:
            self._retire(self.models.pop(model, None))
            return
        self._retire(current)
        self.models[model] = setting

    def _replace_global(self, setting: Setting) -> None:
        self._retire(self.global_setting)
        self.global_setting = setting

    def _retire(self, setting: Setting | None) -> None:
        if setting is not None:
            setting.close()
            self._retired.append(setting)
            del self._retired[:-64]  # traces in flight may still write to a few

    def close(self) -> None:
        """The server stops: every setting saves what it holds, files are closed."""
        settings = [self.global_setting, *self.models.values(), *self._retired]
        for setting in settings:
            setting.close()
        self._default.file.close()  # every setting shares the --trace-config file


def _derive(fallback: Setting, current: Setting | None, update: Update, file) -> Setting:
    """Triton's UpdateTraceSettingInternal: each field from the update, else from the
    current setting where it was specified, else from the fallback."""
    values = {field: getattr(fallback, field) for field in _FIELDS}
    specified = set()
    for field in _FIELDS:
        if field in update.cleared:
            continue
        if field in update.values:
            values[field] = update.values[field]
            specified.add(field)
        elif current is not None and field in current.specified:
            values[field] = getattr(current, field)
            specified.add(field)
    setting = Setting(
        values["level"],
        values["rate"],
        values["count"],
        values["log_frequency"],
        file or fallback.file,
        fallback.mode,
        fallback.config,
        specified,
    )
    if setting.invalid_reason and setting.level != LEVEL_OFF:
        raise InvalidArgument(f"Attempting to set invalid trace setting :{setting.invalid_reason}")
    return setting


__all__ = [
    "LEVEL_OFF",
    "LEVEL_TENSORS",
    "LEVEL_TIMESTAMPS",
    "MODE_OPENTELEMETRY",
    "MODE_TRITON",
    "Setting",
    "TraceSettings",
    "Update",
    "level_names",
    "parse_level_list",
    "parse_number",
    "stoi",
    "update_from_grpc",
    "update_from_json",
]
