// Command upstream answers questions about DRA allocation and CEL selectors with the released
// Kubernetes libraries, so the Python implementation can be compared with them.
//
// It reads JSON lines on stdin and writes one JSON line per input line on stdout:
//
//	{"mode":"allocate", "gates":{...}, "node":{...}, "classes":[...], "slices":[...],
//	 "allocatedClaims":[...], "claims":[...]}
//	  -> {"outcome":"allocated","results":[AllocationResult...],"steps":N}
//	   | {"outcome":"unschedulable","error":"...","steps":N}   (node-local failure or no fit)
//	   | {"outcome":"error","error":"..."}                      (aborts the scheduling attempt)
//	{"mode":"cel", "expression":"...", "device":{"driver":...,"attributes":{...},"capacity":{...},
//	 "allowMultipleAllocations":bool}, "consumableCapacity":bool, "listTypeAttributes":bool,
//	 "newExpressions":bool, "derived":bool}
//	  -> {"outcome":"compile_error"|"runtime_error"|"true"|"false", "error":"...",
//	      "errorType":"...", "maxCost":N, "actualCost":N}
//	  with "derived" (a derived attribute's expression, DRADerivedAttributes):
//	  -> {"outcome":"compile_error"|"runtime_error"|"value", "attribute":{DeviceAttribute}, ...}
//
// Only public APIs are used: structured.NewAllocator(...).Allocate(...) and the cel package.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"reflect"
	"time"

	v1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/cel/environment"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"
)

type request struct {
	Mode string `json:"mode"`

	// allocate
	Gates           map[string]bool              `json:"gates"`
	Node            *v1.Node                     `json:"node"`
	Classes         []*resourceapi.DeviceClass   `json:"classes"`
	Slices          []*resourceapi.ResourceSlice `json:"slices"`
	AllocatedClaims []*resourceapi.ResourceClaim `json:"allocatedClaims"`
	Claims          []*resourceapi.ResourceClaim `json:"claims"`
	TimeoutSeconds  float64                      `json:"timeoutSeconds"`

	// cel
	Expression         string    `json:"expression"`
	Device             celDevice `json:"device"`
	ConsumableCapacity bool      `json:"consumableCapacity"`
	ListTypeAttributes bool      `json:"listTypeAttributes"`
	NewExpressions     bool      `json:"newExpressions"`
	Derived            bool      `json:"derived"`
}

type celDevice struct {
	Driver                   string                                                    `json:"driver"`
	Attributes               map[resourceapi.QualifiedName]resourceapi.DeviceAttribute `json:"attributes"`
	Capacity                 map[resourceapi.QualifiedName]resourceapi.DeviceCapacity  `json:"capacity"`
	AllowMultipleAllocations *bool                                                     `json:"allowMultipleAllocations"`
}

type answer struct {
	Outcome    string                         `json:"outcome"`
	Results    []resourceapi.AllocationResult `json:"results,omitempty"`
	Error      string                         `json:"error,omitempty"`
	ErrorType  string                         `json:"errorType,omitempty"`
	Steps      *int64                         `json:"steps,omitempty"`
	MaxCost    *uint64                        `json:"maxCost,omitempty"`
	ActualCost *uint64                        `json:"actualCost,omitempty"`
	Attribute  *resourceapi.DeviceAttribute   `json:"attribute,omitempty"`
}

func main() {
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<30)
	out := bufio.NewWriter(os.Stdout)
	encoder := json.NewEncoder(out)
	for in.Scan() {
		var req request
		var reply answer
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			reply = answer{Outcome: "bad_input", Error: err.Error()}
		} else {
			switch req.Mode {
			case "allocate":
				reply = allocate(req)
			case "cel":
				reply = evaluate(req)
			default:
				reply = answer{Outcome: "bad_input", Error: fmt.Sprintf("unknown mode %q", req.Mode)}
			}
		}
		if err := encoder.Encode(reply); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		if err := out.Flush(); err != nil {
			os.Exit(1)
		}
	}
	if err := in.Err(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// features maps Kubernetes feature gates to the allocator's features the way kube-scheduler does.
func features(gates map[string]bool) structured.Features {
	return structured.Features{
		AdminAccess:             gates["DRAAdminAccess"],
		PrioritizedList:         gates["DRAPrioritizedList"],
		PartitionableDevices:    gates["DRAPartitionableDevices"],
		DeviceTaints:            gates["DRADeviceTaints"],
		DeviceBindingAndStatus:  gates["DRADeviceBindingConditions"] && gates["DRAResourceClaimDeviceStatus"],
		ConsumableCapacity:      gates["DRAConsumableCapacity"],
		FractionalCapacityRange: gates["DRAFractionalCapacityRange"],
		ListTypeAttributes:      gates["DRAListTypeAttributes"],
		OptionalNodeOperations:  gates["DRAOptionalNodeOperations"],
		DerivedAttributes:       gates["DRADerivedAttributes"],
		CompatibilityGroups:     gates["DRADeviceCompatibilityGroups"],
	}
}

// allocatedState collects what allocated claims hold, as kube-scheduler's claim tracker does:
// admin-access results hold nothing; with consumable capacity, results with a share ID hold a
// share and their consumed capacity; everything else holds the whole device.
func allocatedState(claims []*resourceapi.ResourceClaim, consumable bool) structured.AllocatedState {
	state := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, claim := range claims {
		if claim.Status.Allocation == nil {
			continue
		}
		for _, result := range claim.Status.Allocation.Devices.Results {
			if result.AdminAccess != nil && *result.AdminAccess {
				continue
			}
			id := structured.MakeDeviceID(result.Driver, result.Pool, result.Device)
			if consumable && result.ShareID != nil {
				state.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, result.ShareID))
				if result.ConsumedCapacity != nil {
					state.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, result.ConsumedCapacity))
				}
				continue
			}
			state.AllocatedDevices.Insert(id)
		}
	}
	return state
}

type classLister []*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) { return l, nil }

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	for _, class := range l {
		if class.Name == name {
			return class, nil
		}
	}
	return nil, apierrors.NewNotFound(schema.GroupResource{Group: "resource.k8s.io", Resource: "deviceclasses"}, name)
}

func allocate(req request) answer {
	timeout := 10 * time.Second
	if req.TimeoutSeconds > 0 {
		timeout = time.Duration(req.TimeoutSeconds * float64(time.Second))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if req.Node == nil {
		req.Node = &v1.Node{}
	}
	feats := features(req.Gates)
	celCache := cel.NewCache(10, cel.Features{EnableConsumableCapacity: feats.ConsumableCapacity, EnableListTypeAttributes: feats.ListTypeAttributes})
	allocator, err := structured.NewAllocator(ctx, feats, allocatedState(req.AllocatedClaims, feats.ConsumableCapacity), classLister(req.Classes), req.Slices, celCache)
	if err != nil {
		return answer{Outcome: "error", Error: err.Error()}
	}
	results, err := allocator.Allocate(ctx, req.Node, req.Claims)
	steps := allocateOneInvocations(allocator)
	switch {
	case err != nil && errors.Is(err, structured.ErrFailedAllocationOnNode):
		return answer{Outcome: "unschedulable", Error: err.Error(), Steps: steps}
	case err != nil && ctx.Err() != nil:
		return answer{Outcome: "timeout", Error: err.Error(), Steps: steps}
	case err != nil:
		return answer{Outcome: "error", Error: err.Error(), Steps: steps}
	case results == nil && len(req.Claims) > 0:
		return answer{Outcome: "unschedulable", Steps: steps}
	}
	exactConsumedCapacity(results)
	return answer{Outcome: "allocated", Results: results, Steps: steps}
}

// exactConsumedCapacity works around Quantity's JSON form, which drops the suffix past "E" (a
// DecimalSI 1e21 prints as "1"): such a value is written in exponent form instead, same value.
func exactConsumedCapacity(results []resourceapi.AllocationResult) {
	for i := range results {
		for j := range results[i].Devices.Results {
			consumed := results[i].Devices.Results[j].ConsumedCapacity
			for name, quantity := range consumed {
				if printed, err := resource.ParseQuantity(quantity.String()); err != nil || printed.Cmp(quantity) != 0 {
					consumed[name] = *resource.NewDecimalQuantity(*quantity.AsDec(), resource.DecimalExponent)
				}
			}
		}
	}
}

// allocateOneInvocations reads the allocator's optional statistics (GetStats) without naming
// their internal type; nil when the chosen implementation has none.
func allocateOneInvocations(allocator structured.Allocator) *int64 {
	method := reflect.ValueOf(allocator).MethodByName("GetStats")
	if !method.IsValid() {
		return nil
	}
	field := method.Call(nil)[0].FieldByName("NumAllocateOneInvocations")
	if !field.IsValid() {
		return nil
	}
	steps := field.Int()
	return &steps
}

// evaluate compiles with cost estimation, as API validation does (the allocator's cache skips it),
// and evaluates with the runtime cost limit the allocator uses. The environment is the one for
// stored expressions (what the allocator uses: every field declared whatever the features) or, with
// newExpressions, the one the API server validates new objects with (fields follow the features).
func evaluate(req request) answer {
	features := cel.Features{EnableConsumableCapacity: req.ConsumableCapacity, EnableListTypeAttributes: req.ListTypeAttributes}
	options := cel.Options{DerivedAttribute: req.Derived}
	if req.NewExpressions {
		options.EnvType = ptr.To(environment.NewExpressions)
	}
	compiled := cel.GetCompiler(features).CompileCELExpression(req.Expression, options)
	var maxCost *uint64
	if compiled.MaxCost != math.MaxUint64 {
		maxCost = &compiled.MaxCost
	}
	if compiled.Error != nil {
		return answer{Outcome: "compile_error", Error: compiled.Error.Detail, ErrorType: string(compiled.Error.Type), MaxCost: maxCost}
	}
	device := cel.Device{
		Driver:                   req.Device.Driver,
		AllowMultipleAllocations: req.Device.AllowMultipleAllocations,
		Attributes:               req.Device.Attributes,
		Capacity:                 req.Device.Capacity,
	}
	if req.Derived {
		attribute, details, err := compiled.EvaluateDerivedAttribute(context.Background(), device)
		var actualCost *uint64
		if details != nil {
			actualCost = details.ActualCost()
		}
		if err != nil {
			return answer{Outcome: "runtime_error", Error: err.Error(), MaxCost: maxCost, ActualCost: actualCost}
		}
		return answer{Outcome: "value", Attribute: attribute, MaxCost: maxCost, ActualCost: actualCost}
	}
	matches, details, err := compiled.DeviceMatches(context.Background(), device)
	var actualCost *uint64
	if details != nil {
		actualCost = details.ActualCost()
	}
	if err != nil {
		return answer{Outcome: "runtime_error", Error: cel.EnhanceRuntimeError(err).Error(), MaxCost: maxCost, ActualCost: actualCost}
	}
	return answer{Outcome: fmt.Sprint(matches), MaxCost: maxCost, ActualCost: actualCost}
}
