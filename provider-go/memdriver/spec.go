package memdriver

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
)

// Spec is the providerSpec of a MachineClass of the in-memory provider. Every field is optional.
//
//	{"createLatency": "300ms", "bootDelay": "1s", "initialization": "reported",
//	 "failures": {"create": {"code": "ResourceExhausted", "times": 2}}}
type Spec struct {
	// CreateLatency is how long CreateMachine takes before the VM exists. A call whose deadline
	// passes first creates nothing and fails with DeadlineExceeded.
	CreateLatency time.Duration
	// BootDelay is the time from creation until the VM's Node registers.
	BootDelay time.Duration
	// Initialization is "none" (the default: InitializeMachine succeeds at once), "reported"
	// (GetMachineStatus answers Uninitialized until InitializeMachine ran, and the Node
	// registers only after it) or "unimplemented" (InitializeMachine answers Unimplemented, as
	// most upstream providers do).
	Initialization string
	// Failures makes the first Times calls of a method fail with Code, per machine.
	Failures map[string]Failure
}

// Failure injects errors into one method.
type Failure struct {
	Code  codes.Code
	Times int
}

// The methods failures can be injected into.
var failingMethods = []string{"create", "initialize", "delete"}

var initializations = []string{"none", "reported", "unimplemented"}

// ParseSpec validates a class's providerSpec. Errors are InvalidArgument and name the field
// (providerSpec.<path>), as the manager shows them on the machine.
func ParseSpec(class *v1alpha1.MachineClass) (Spec, error) {
	spec := Spec{Initialization: "none", Failures: map[string]Failure{}}
	raw := class.ProviderSpec.Raw
	if len(raw) == 0 {
		return spec, nil
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return spec, invalid("providerSpec", "not a JSON object: %v", err)
	}
	for _, name := range sortedKeys(fields) {
		value := fields[name]
		switch name {
		case "createLatency", "bootDelay":
			duration, err := parseDuration(value)
			if err != nil {
				return spec, invalid("providerSpec."+name, "%v", err)
			}
			if name == "createLatency" {
				spec.CreateLatency = duration
			} else {
				spec.BootDelay = duration
			}
		case "initialization":
			if err := json.Unmarshal(value, &spec.Initialization); err != nil || !contains(initializations, spec.Initialization) {
				return spec, invalid("providerSpec.initialization", "must be one of %s", strings.Join(initializations, ", "))
			}
		case "failures":
			if err := parseFailures(value, spec.Failures); err != nil {
				return spec, err
			}
		default:
			return spec, invalid("providerSpec."+name, "unknown field (known: createLatency, bootDelay, initialization, failures)")
		}
	}
	return spec, nil
}

func parseFailures(value json.RawMessage, into map[string]Failure) error {
	var methods map[string]struct {
		Code  string `json:"code"`
		Times int    `json:"times"`
	}
	if err := json.Unmarshal(value, &methods); err != nil {
		return invalid("providerSpec.failures", "must map a method to {\"code\": ..., \"times\": ...}: %v", err)
	}
	for _, method := range sortedKeys(methods) {
		failure := methods[method]
		path := "providerSpec.failures." + method
		if !contains(failingMethods, method) {
			return invalid(path, "unknown method (known: %s)", strings.Join(failingMethods, ", "))
		}
		code := codes.StringToCode(failure.Code)
		if code == codes.OK || (code == codes.Unknown && failure.Code != "Unknown") {
			return invalid(path+".code", "%q is not a machine error code", failure.Code)
		}
		if failure.Times < 0 {
			return invalid(path+".times", "must not be negative")
		}
		into[method] = Failure{Code: code, Times: failure.Times}
	}
	return nil
}

func parseDuration(value json.RawMessage) (time.Duration, error) {
	var text string
	if err := json.Unmarshal(value, &text); err != nil {
		return 0, fmt.Errorf("must be a duration string such as \"500ms\"")
	}
	duration, err := time.ParseDuration(text)
	if err != nil {
		return 0, fmt.Errorf("must be a duration string such as \"500ms\": %v", err)
	}
	if duration < 0 {
		return 0, fmt.Errorf("must not be negative")
	}
	return duration, nil
}

func invalid(path, format string, args ...any) error {
	return status.Error(codes.InvalidArgument, path+": "+fmt.Sprintf(format, args...))
}

func contains(values []string, value string) bool {
	for _, candidate := range values {
		if candidate == value {
			return true
		}
	}
	return false
}

func sortedKeys[V any](values map[string]V) []string {
	keys := make([]string, 0, len(values))
	for key := range values {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	return keys
}
