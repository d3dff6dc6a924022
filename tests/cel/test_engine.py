"""The engine layer: compile cache, limits, memoization, the driver fast path, engine choice."""

from __future__ import annotations

import pytest
from case import DEFAULT_DEVICE

from allocator import cel
from allocator.cel import Engine
from allocator.cel.backend import CELDevice, CompileOptions

ENGINES = [
    pytest.param("celpy", id="celpy"),
    pytest.param("cel-expr", id="cel-expr", marks=pytest.mark.skipif(
        not cel.cel_expr_available(), reason="cel-expr-python is not installed")),
]


class CountingBackend:
    """A backend whose programs answer `device.driver == expression` and count their work."""

    name = "counting"

    def __init__(self) -> None:
        self.compiled: list[str] = []
        self.activations = 0
        self.evaluations = 0

    def compile(self, expression: str, options: CompileOptions) -> CountingProgram:
        self.compiled.append(expression)
        return CountingProgram(self, expression)

    def activation(self, device: CELDevice) -> CELDevice:
        self.activations += 1
        return device


class CountingProgram:
    def __init__(self, backend: CountingBackend, expression: str) -> None:
        self.backend = backend
        self.expression = expression

    def evaluate(self, activation: object) -> bool:
        self.backend.evaluations += 1
        if self.expression == "fail":
            raise cel.CELRuntimeError("boom")
        assert isinstance(activation, CELDevice)
        return activation.driver == self.expression


def device(memo_key: object = None, driver: str = "gpu.example.com") -> CELDevice:
    return cel.make_device(driver, memo_key=memo_key)


def test_compile_is_cached_per_expression_and_options() -> None:
    backend = CountingBackend()
    engine = Engine(backend)
    first = engine.compile("gpu.example.com")
    assert engine.compile("gpu.example.com") is first
    assert engine.compile("gpu.example.com", CompileOptions(list_type_attributes=True)) is not first
    assert backend.compiled == ["gpu.example.com", "gpu.example.com"]


def test_results_are_memoized_by_memo_key() -> None:
    backend = CountingBackend()
    selector = Engine(backend).compile("gpu.example.com")
    keyed = device(("uid", 1, "gpu-0"))
    assert selector.matches(keyed)
    assert selector.matches(keyed)
    assert backend.evaluations == 1
    assert not selector.matches(device(("uid", 1, "gpu-1"), driver="other"))
    assert backend.evaluations == 2
    unkeyed = device()
    selector.matches(unkeyed)
    selector.matches(unkeyed)
    assert backend.evaluations == 4


def test_runtime_errors_are_memoized_and_raised_each_time() -> None:
    backend = CountingBackend()
    selector = Engine(backend).compile("fail")
    keyed = device("key")
    for _ in range(2):
        with pytest.raises(cel.CELRuntimeError, match="boom") as raised:
            selector.matches(keyed)
        assert raised.value.expression == "fail"
    assert backend.evaluations == 1


def test_memo_is_bounded_first_in_first_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cel, "MEMO_ENTRIES_PER_DEVICE", 2)
    backend = CountingBackend()
    engine = Engine(backend)
    selectors = [engine.compile(name) for name in ("a", "b", "c")]
    keyed = device("key")
    for selector in selectors:
        selector.matches(keyed)
    assert backend.evaluations == 3
    selectors[2].matches(keyed)
    assert backend.evaluations == 3
    selectors[0].matches(keyed)  # evicted when "c" arrived
    assert backend.evaluations == 4
    assert len(keyed.results) == 2


def test_memo_lives_on_the_device_view() -> None:
    backend = CountingBackend()
    selector = Engine(backend).compile("gpu.example.com")
    selector.matches(device(("uid", 1, "gpu-0")))
    selector.matches(device(("uid", 1, "gpu-0")))  # a new view (next generation) is evaluated afresh
    assert backend.evaluations == 2


def test_activation_is_built_once_per_device_and_shared_by_selectors() -> None:
    backend = CountingBackend()
    engine = Engine(backend)
    shared = device()
    engine.compile("gpu.example.com").matches(shared)
    engine.compile("other").matches(shared)
    assert backend.activations == 1
    assert shared.activations == {"counting": shared}


def test_driver_equality_takes_the_fast_path() -> None:
    backend = CountingBackend()
    engine = Engine(backend)
    for expression in ('device.driver == "gpu.example.com"', "'gpu.example.com' == device.driver"):
        selector = engine.compile(expression)
        assert selector.matches(device("k"))
        assert not selector.matches(device("k2", driver="other.example.com"))
    assert backend.compiled == []
    assert backend.evaluations == 0
    engine.compile('device.driver == "gpu.example.com" && true')  # any other shape goes to the engine
    assert backend.compiled == ['device.driver == "gpu.example.com" && true']


def test_expression_length_limit_counts_bytes() -> None:
    engine = Engine(CountingBackend())
    engine.compile("x" * 10 * 1024)
    with pytest.raises(cel.CELCompileError, match="10 KiB"):
        engine.compile("é" * (5 * 1024 + 1))


def test_non_string_expression_is_a_compile_error() -> None:
    with pytest.raises(cel.CELCompileError, match="must be a string"):
        Engine(CountingBackend()).compile(42)  # type: ignore[arg-type]


@pytest.mark.parametrize("engine_name", ENGINES)
def test_cost_limit_error_names_cost_and_limit(engine_name: str) -> None:
    expression = 'device.attributes["gpu.example.com"].model.matches("a.*b")'
    with pytest.raises(cel.CELCompileError, match=r"estimated cost \d+ exceeds the limit of 3"):
        cel.get_engine(engine_name).compile(expression, CompileOptions(cost_limit=3))


@pytest.mark.parametrize("engine_name", ENGINES)
def test_missing_attribute_error_suggests_has_or_optional(engine_name: str) -> None:
    selector = cel.get_engine(engine_name).compile('device.attributes["gpu.example.com"].nope == 1')
    with pytest.raises(cel.CELRuntimeError, match=r"nope") as raised:
        selector.matches(cel.make_device(**DEFAULT_DEVICE))
    assert "has(" in str(raised.value) and ".?nope" in str(raised.value)


@pytest.mark.parametrize("engine_name", ENGINES)
def test_engines_memoize_real_selectors(engine_name: str) -> None:
    selector = cel.get_engine(engine_name).compile('device.attributes["gpu.example.com"].index == 3')
    keyed = cel.make_device(**DEFAULT_DEVICE, memo_key=("slice-uid", 4, "gpu-3"))
    assert selector.matches(keyed) is True
    keyed.attributes["gpu.example.com"]["index"] = 4  # a memo hit ignores this; new generations get new keys
    assert selector.matches(keyed) is True


def test_use_engine_chooses_the_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cel, "_chosen", None)
    cel.use_engine("celpy")
    assert cel.default_engine().name == "celpy"
    assert cel.compile("true").engine == "celpy"
    with pytest.raises(ValueError, match="unknown CEL engine 'fastest'"):
        cel.use_engine("fastest")


def test_default_engine_prefers_cel_expr_and_falls_back_to_celpy(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cel, "_chosen", None)
    assert cel.default_engine().name == ("cel-expr" if cel.cel_expr_available() else "celpy")
    monkeypatch.setattr(cel, "cel_expr_available", lambda: False)
    monkeypatch.setattr(cel, "_engines", {})
    assert cel.default_engine().name == "celpy"
    with pytest.raises(ValueError, match="cel-expr-python"):
        cel.get_engine("cel-expr")


@pytest.mark.skipif(not cel.cel_expr_available(), reason="cel-expr-python is not installed")
def test_unusable_cel_expr_falls_back_to_celpy(monkeypatch: pytest.MonkeyPatch) -> None:
    from allocator.cel import celexpr_backend

    def broken() -> None:
        raise RuntimeError("INVALID_ARGUMENT: incompatible release")

    monkeypatch.setattr(cel, "_chosen", None)
    monkeypatch.setattr(cel, "cel_expr_available", lambda: True)
    monkeypatch.setattr(cel, "_engines", {})
    monkeypatch.setattr(celexpr_backend, "CelExprBackend", broken)
    assert cel.default_engine().name == "celpy"


def test_make_device_resolves_domains() -> None:
    built = cel.make_device(
        "gpu.example.com",
        {"model": {"string": "A100"}, "numa.example.com/node": {"int": 1}, "v": {"version": "1.2.3"}},
        {"memory": {"value": "80Gi"}, "other.example.com/slots": {"value": 4}},
        allow_multiple_allocations=None,
        memo_key=("uid", 1, "gpu-0"),
    )
    assert built.attributes["gpu.example.com"]["model"] == "A100"
    assert built.attributes["numa.example.com"] == {"node": 1}
    assert str(built.attributes["gpu.example.com"]["v"]) == "1.2.3"
    assert str(built.capacity["gpu.example.com"]["memory"]) == "80Gi"
    assert str(built.capacity["other.example.com"]["slots"]) == "4"
    assert built.allow_multiple_allocations is False
    assert built.memo_key == ("uid", 1, "gpu-0")


@pytest.mark.parametrize(
    ("attributes", "capacity", "message"),
    [
        ({"a": {"int": True}}, {}, "attribute 'a': int value"),
        ({"a": {"int": 2**63}}, {}, "attribute 'a': int value"),
        ({"a": {"int": 1, "string": "x"}}, {}, "exactly one of"),
        ({"a": {"version": "v1"}}, {}, "attribute 'a': invalid semantic version"),
        ({"a": {"ints": 3}}, {}, "must be a list"),
        ({"a": {"float": 1.5}}, {}, "unknown attribute type 'float'"),
        ({}, {"memory": {"value": "80 Gi"}}, "capacity 'memory': invalid quantity"),
        ({}, {"memory": {}}, "capacity 'memory': a capacity needs a 'value'"),
    ],
)
def test_make_device_rejects_malformed_values(attributes: dict, capacity: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        cel.make_device("gpu.example.com", attributes, capacity)


def test_make_device_needs_a_driver() -> None:
    with pytest.raises(ValueError, match="driver"):
        cel.make_device("")


def test_configured_engine_name_checks_without_importing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cel, "_chosen", None)
    assert cel.configured_engine_name() == ("cel-expr" if cel.cel_expr_available() else "celpy")
    with pytest.raises(ValueError, match="unknown CEL engine 'fastest'"):
        cel.use_engine("fastest")
    monkeypatch.setattr(cel, "cel_expr_available", lambda: False)
    with pytest.raises(ValueError, match="needs the cel-expr-python package"):
        cel.use_engine("cel-expr")


def test_a_driver_equality_does_not_load_an_engine() -> None:
    """The engines' modules cost ~25 MB resident (issue 17); selectors that only name a driver, the
    usual DeviceClass, never need them."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from allocator import cel\n"
        "selector = cel.compile('device.driver == \"gpu.example.com\"')\n"
        "device = cel.make_device('gpu.example.com', {}, {}, allow_multiple_allocations=None)\n"
        "assert selector.matches(device) and selector.engine == cel.configured_engine_name()\n"
        "print(sorted(m for m in sys.modules if m.startswith(('cel_expr_python', 'celpy', 'lark'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
