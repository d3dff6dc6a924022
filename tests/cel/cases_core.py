"""Conformance table for the DRA CEL environment: domains, types, numeric and boolean semantics,
macros, optional types, bindings, strings, sets, errors and limits. Expected results follow
upstream Kubernetes (cel-go with the DRA environment)."""

from __future__ import annotations

from case import CelCase

from allocator.cel import CompileOptions

UNLIMITED = CompileOptions(cost_limit=None)

GPU = 'device.attributes["gpu.example.com"]'
CAP = 'device.capacity["gpu.example.com"]'

LIST_OPTIONS = CompileOptions(list_type_attributes=True)
CONSUMABLE = CompileOptions(consumable_capacity=True)

LIST_DEVICE = {
    "driver": "gpu.example.com",
    "attributes": {
        "model": {"string": "A100"},
        "ints": {"ints": [1, 2, 3]},
        "strings": {"strings": ["a", "b"]},
        "bools": {"bools": [True]},
        "versions": {"versions": ["1.0.0", "2.0.0-rc.1"]},
    },
    "capacity": {},
}
SHARED_DEVICE = {"driver": "gpu.example.com", "attributes": {}, "capacity": {},
                 "allow_multiple_allocations": True}

# estimated at ~155 million cost units: rejected by the default limit of 1,000,000
EXPENSIVE = ("device.attributes.all(a, device.attributes.all(b, device.attributes.all(c, "
             "device.attributes[a].all(k, k.matches(b + c)))))")


def _long_literal(total_bytes: int) -> str:
    prefix = f'{GPU}.model == "'
    return prefix + "x" * (total_bytes - len(prefix) - 1) + '"'


CASES: list[CelCase] = [
    # driver and the fast path shape
    CelCase("driver_equal", 'device.driver == "gpu.example.com"', True),
    CelCase("driver_other", 'device.driver == "other.example.com"', False),
    CelCase("driver_reversed", '"gpu.example.com" == device.driver', True),
    CelCase("driver_in_list", 'device.driver in ["a.example.com", "gpu.example.com"]', True),
    # domains
    CelCase("attribute_in_driver_domain", f'{GPU}.model == "LATEST-GPU-MODEL"', True),
    CelCase("attribute_index_syntax", f'{GPU}["model"] == "LATEST-GPU-MODEL"', True),
    CelCase("attribute_in_other_domain", 'device.attributes["numa.example.com"].node == 1', True),
    CelCase("qualified_name_not_in_driver_domain", f"has({GPU}.node)", False),
    CelCase("unknown_domain_is_empty_map", 'device.attributes["unknown.example.com"].size() == 0', True),
    CelCase("unknown_domain_has", 'has(device.attributes["unknown.example.com"].model)', False),
    CelCase("unknown_domain_in", '"model" in device.attributes["unknown.example.com"]', False),
    CelCase("unknown_domain_lookup_is_error", 'device.attributes["unknown.example.com"].model == "x"',
            "runtime_error"),
    CelCase("domain_membership_known", '"gpu.example.com" in device.attributes', True),
    CelCase("domain_membership_unknown", '"unknown.example.com" in device.attributes', False),
    CelCase("unknown_capacity_domain_is_empty", 'device.capacity["unknown.example.com"].size() == 0', True),
    CelCase("unknown_attribute_is_error", f"{GPU}.nope == 1", "runtime_error"),
    CelCase("has_unknown_attribute", f"has({GPU}.nope)", False),
    CelCase("has_known_attribute", f"has({GPU}.model)", True),
    CelCase("optional_missing_attribute", f'{GPU}.?nope.orValue("none") == "none"', True),
    CelCase("optional_present_attribute", f"{GPU}.?model.hasValue()", True),
    CelCase("dynamic_domain_key", 'cel.bind(d, "numa.example.com", device.attributes[d].node == 1)', True),
    CelCase("iterate_domains", 'device.attributes.exists(d, d == "numa.example.com")', True),
    CelCase("iterate_attribute_names", f'{GPU}.exists(k, k == "driverVersion")', True),
    CelCase("count_attribute_names", f"{GPU}.size() == 5", True),
    CelCase("undefined_device_field", "device.foo == 1", "compile_error"),
    CelCase("undeclared_variable", "foo == 1", "compile_error"),
    # attribute value types
    CelCase("int_attribute", f"{GPU}.index == 3", True),
    CelCase("int_attribute_vs_double", f"{GPU}.index == 3.0", True),
    CelCase("int_attribute_vs_uint", f"{GPU}.index > 2u", True),
    CelCase("bool_attribute", f"{GPU}.migCapable == true", True),
    CelCase("bool_attribute_is_not_int", f"{GPU}.migCapable == 1", False),
    CelCase("bool_attribute_negation", f"!{GPU}.migCapable", False),
    CelCase("string_attribute", f'{GPU}.uuid.startsWith("gpu-")', True),
    CelCase("version_attribute_greater", f'{GPU}.driverVersion.isGreaterThan(semver("1.2.0"))', True),
    CelCase("version_attribute_less", f'{GPU}.driverVersion.isLessThan(semver("1.10.0"))', True),
    CelCase("version_attribute_equal", f'{GPU}.driverVersion == semver("1.2.3")', True),
    CelCase("version_attribute_compare", f'{GPU}.driverVersion.compareTo(semver("1.2.3")) == 0', True),
    CelCase("version_attribute_major", f"{GPU}.driverVersion.major() == 1", True),
    CelCase("capacity_is_quantity", f'{CAP}.memory.compareTo(quantity("80Gi")) == 0', True),
    CelCase("capacity_greater", f'{CAP}.memory.isGreaterThan(quantity("40Gi"))', True),
    CelCase("capacity_equal_other_spelling", f'{CAP}.memory == quantity("81920Mi")', True),
    CelCase("capacity_as_integer", f"{CAP}.cores.asInteger() == 108", True),
    CelCase("capacity_missing_is_error", f"{CAP}.nope.isInteger()", "runtime_error"),
    # numeric and boolean semantics
    CelCase("bool_int_equality_rejected", "true == 1", "compile_error"),
    CelCase("int_uint_equality_rejected", "1 == 1u", "compile_error"),
    CelCase("dyn_int_uint_equal", "dyn(1) == 1u", True),
    CelCase("cross_type_less", "1 < 2.5", True),
    CelCase("cross_type_greater", "2u > 1", True),
    CelCase("integer_division", "7 / 2 == 3", True),
    CelCase("double_arithmetic", "7.0 / 2.0 == 3.5", True),
    CelCase("division_by_zero", f"{GPU}.index / 0 == 1", "runtime_error"),
    CelCase("int_overflow", f"9223372036854775807 + {GPU}.index > 0", "runtime_error"),
    CelCase("runtime_type_mismatch", f"{GPU}.model > 1", "runtime_error"),
    CelCase("error_absorbed_by_or", f"{GPU}.nope == 1 || true", True),
    CelCase("error_absorbed_by_and", f"false && {GPU}.nope == 1", False),
    CelCase("error_not_absorbed", f"true && {GPU}.nope == 1", "runtime_error"),
    CelCase("ternary", f'{GPU}.index > 2 ? true : {GPU}.nope == 1', True),
    # result type
    CelCase("int_result_rejected", "1 + 1", "compile_error"),
    CelCase("string_result_rejected", '"yes"', "compile_error"),
    CelCase("dyn_non_bool_result", f"{GPU}.index", "runtime_error"),
    CelCase("syntax_error", "device.driver ==", "compile_error"),
    CelCase("unknown_function", "device.driver.frobnicate()", "compile_error"),
    # macros
    CelCase("all", "[1, 2, 3].all(x, x > 0)", True),
    CelCase("exists", "[1, 2, 3].exists(x, x > 2)", True),
    CelCase("exists_one", "[1, 2, 3].exists_one(x, x > 1)", False),
    CelCase("map", "[1, 2, 3].map(x, x * 2) == [2, 4, 6]", True),
    CelCase("map_with_filter", "[1, 2, 3].map(x, x > 1, x * 2) == [4, 6]", True),
    CelCase("filter", "[1, 2, 3].filter(x, x > 1).size() == 2", True),
    CelCase("macro_over_attribute_map", f'{GPU}.filter(k, k.startsWith("mig")).size() == 1', True),
    CelCase("two_variable_all", '{"a": 1, "b": 2}.all(k, v, v > 0)', True),
    CelCase("two_variable_exists_over_attributes", f'{GPU}.exists(k, v, k == "index" && v == 3)', True),
    CelCase("bind", f'cel.bind(gpu, {GPU}, gpu.index == 3 && gpu.model.startsWith("LATEST"))', True),
    # optional types
    CelCase("optional_of", "optional.of(1).hasValue()", True),
    CelCase("optional_none", "optional.none().orValue(5) == 5", True),
    CelCase("optional_map_select", '{"a": 1}.?a.orValue(0) == 1', True),
    CelCase("optional_list_index", "[1, 2][?5].orValue(0) == 0", True),
    # cel-go types an index of a dyn value as dyn (list and map overloads disagree), so orValue on
    # it takes the default's type and the literal is homogeneous; `.?` keeps the value type dyn.
    CelCase("optional_index_of_dyn_takes_the_default_type", f"2 in [{GPU}.ints[?0].orValue(-5), 2]", True,
            device=LIST_DEVICE, options=LIST_OPTIONS),
    CelCase("optional_index_of_absent_dyn_fails_at_run_time", f"2 in [{GPU}.nope[?0].orValue(-5), 2]",
            "runtime_error"),
    CelCase("optional_select_of_dyn_stays_dyn", f'[{GPU}.?model.orValue("x"), "y"] == ["x", "y"]',
            "compile_error"),
    # strings extension
    CelCase("string_contains", f'{GPU}.model.contains("GPU")', True),
    CelCase("string_ends_with", f'{GPU}.model.endsWith("MODEL")', True),
    CelCase("string_matches", f'{GPU}.uuid.matches("^gpu-[0-9a-f]{{8}}-")', True),
    CelCase("string_size", f"size({GPU}.model) == 16", True),
    CelCase("string_lower_ascii", f'{GPU}.model.lowerAscii() == "latest-gpu-model"', True),
    CelCase("string_upper_ascii", '"abc".upperAscii() == "ABC"', True),
    CelCase("string_split", f'{GPU}.model.split("-") == ["LATEST", "GPU", "MODEL"]', True),
    CelCase("string_replace", '"a-b-c".replace("-", "_") == "a_b_c"', True),
    CelCase("string_substring", '"abcdef".substring(1, 3) == "bc"', True),
    CelCase("string_trim", '"  x ".trim() == "x"', True),
    CelCase("string_char_at", '"abc".charAt(1) == "b"', True),
    CelCase("string_index_of", '"abcabc".indexOf("c") == 2', True),
    CelCase("string_index_of_offset", '"abcabc".indexOf("c", 3) == 5', True),
    CelCase("string_last_index_of", '"abcabc".lastIndexOf("b") == 4', True),
    # cel-go cannot bound the size of a typed list's strings: over the cost limit unless it is lifted
    CelCase("string_join", '["a", "b"].join("-") == "a-b"', True, options=UNLIMITED),
    CelCase("string_join_over_the_cost_limit", '["a", "b"].join("-") == "a-b"', "compile_error"),
    CelCase("string_format", '"%s-%d".format([dyn("a"), 1]) == "a-1"', True),
    CelCase("mixed_list_literal", '[1, "a"].size() == 2', "compile_error"),
    CelCase("mixed_map_literal", '{"a": 1, "b": "c"}.size() == 2', "compile_error"),
    # dyn is a type of its own to the homogeneous-literal check
    CelCase("dyn_mixed_list_literal", '[dyn(1), "a"].size() == 2', "compile_error"),
    # sets extension
    CelCase("sets_contains", "sets.contains([1, 2, 3], [1, 2])", True),
    CelCase("sets_contains_missing", "sets.contains([1, 2], [3])", False),
    CelCase("sets_equivalent", "sets.equivalent([1, 2], [2, 1, 1])", True),
    CelCase("sets_intersects", "sets.intersects([1], [2])", False),
    CelCase("sets_on_attribute", f'sets.contains(["LATEST-GPU-MODEL", "other"], [{GPU}.model])', True),
    # consumable capacity
    CelCase("allow_multiple_declared", "device.allowMultipleAllocations", True, SHARED_DEVICE, CONSUMABLE),
    CelCase("allow_multiple_defaults_false", "device.allowMultipleAllocations == false", True,
            options=CONSUMABLE),
    CelCase("allow_multiple_needs_feature", "device.allowMultipleAllocations", "compile_error",
            SHARED_DEVICE),
    # list attributes
    CelCase("list_exists", f"{GPU}.ints.exists(x, x > 2)", True, LIST_DEVICE, LIST_OPTIONS),
    CelCase("list_includes", f"{GPU}.ints.includes(2)", True, LIST_DEVICE, LIST_OPTIONS),
    CelCase("list_includes_missing", f'{GPU}.strings.includes("c")', False, LIST_DEVICE, LIST_OPTIONS),
    CelCase("list_includes_version", f'{GPU}.versions.includes(semver("2.0.0-rc.1"))', True, LIST_DEVICE,
            LIST_OPTIONS),
    CelCase("list_includes_bool", f"{GPU}.bools.includes(true)", True, LIST_DEVICE, LIST_OPTIONS),
    CelCase("scalar_includes", f'{GPU}.model.includes("A100")', True, LIST_DEVICE, LIST_OPTIONS),
    CelCase("scalar_includes_other", f'{GPU}.model.includes("H100")', False, LIST_DEVICE, LIST_OPTIONS),
    CelCase("list_size", f"{GPU}.strings.size() == 2", True, LIST_DEVICE, LIST_OPTIONS),
    CelCase("list_index", f'{GPU}.strings[1] == "b"', True, LIST_DEVICE, LIST_OPTIONS),
    CelCase("includes_needs_feature", f"{GPU}.ints.includes(2)", "compile_error", LIST_DEVICE),
    # limits
    CelCase("length_at_limit", _long_literal(10 * 1024), False),
    CelCase("length_over_limit", _long_literal(10 * 1024 + 1), "compile_error"),
    CelCase("cost_over_limit", EXPENSIVE, "compile_error"),
    CelCase("cost_limit_disabled", EXPENSIVE, False, options=CompileOptions(cost_limit=None)),
    CelCase("cost_limit_lowered", f'{GPU}.model.matches("x.*y")', "compile_error",
            options=CompileOptions(cost_limit=2)),
]
