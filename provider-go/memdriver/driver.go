// Package memdriver is a stateful in-memory provider behind upstream's driver.Driver
// interface: VMs live in a map, and when a target cluster is given their Nodes register there
// and heartbeat (Lease renewals and Ready status), the way provider-virtual's kubelets do, so
// machines reach Running. It serves the bridge's tests, the e2e scenario through the bridge and
// the benchmark against upstream's machine-controller (docs/provider-authoring.md).
package memdriver

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
)

// ProviderName is the MachineClass `provider` value of the in-memory driver.
const ProviderName = "Memory"

// ProviderIDPrefix starts every providerID of the in-memory driver.
const ProviderIDPrefix = "memory:///"

// CSIDriver is the CSI driver name whose volumes GetVolumeIDs recognises.
const CSIDriver = "memory.csi.mcm.gardener.cloud"

// Config of a Driver.
type Config struct {
	// Target is the cluster the Nodes register in; nil registers none (machines then never
	// get a Node, which is enough for the conformance kit).
	Target kubernetes.Interface
	// LeaseInterval is how often a Node's Lease is renewed (default 10 s, the kubelet's).
	LeaseInterval time.Duration
	// StatusInterval is how often a Node's Ready condition is posted again (default 30 s).
	StatusInterval time.Duration
	// Tick is how often the heartbeat round runs: a new VM's Node registers within one tick
	// of its boot (default 1 s; the benchmark uses provider-virtual's 200 ms).
	Tick time.Duration
	// Logger; slog.Default() when nil.
	Logger *slog.Logger
	// Now is the clock (tests); time.Now when nil.
	Now func() time.Time
}

// VM is one virtual machine.
type VM struct {
	MachineName string
	ClassName   string
	ProviderID  string
	NodeName    string
	CreatedAt   time.Time
	// BootAt is when the Node may register.
	BootAt time.Time
	// NeedsInitialization is set for classes with initialization "reported" until
	// InitializeMachine ran.
	NeedsInitialization bool
}

// Driver is the in-memory provider. It implements driver.Driver.
type Driver struct {
	config Config
	logger *slog.Logger

	mu  sync.Mutex
	vms map[string]*VM // by machine name
	// failed counts the injected failures served, by method and machine.
	failed map[string]int
	nodes  *nodeRegistry
}

var _ driver.Driver = (*Driver)(nil)

// New returns an empty in-memory provider. Call Run to start the Nodes' heartbeats.
func New(config Config) *Driver {
	if config.LeaseInterval <= 0 {
		config.LeaseInterval = 10 * time.Second
	}
	if config.StatusInterval <= 0 {
		config.StatusInterval = 30 * time.Second
	}
	if config.Tick <= 0 {
		config.Tick = time.Second
	}
	if config.Now == nil {
		config.Now = time.Now
	}
	logger := config.Logger
	if logger == nil {
		logger = slog.Default()
	}
	d := &Driver{config: config, logger: logger, vms: map[string]*VM{}, failed: map[string]int{}}
	d.nodes = newNodeRegistry(d)
	return d
}

// VMs returns a copy of the VMs, sorted by machine name.
func (d *Driver) VMs() []VM {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]VM, 0, len(d.vms))
	for _, vm := range d.vms {
		out = append(out, *vm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].MachineName < out[j].MachineName })
	return out
}

// CreateMachine creates the VM of a machine; a second call for the same machine returns it.
func (d *Driver) CreateMachine(ctx context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if req.Machine == nil {
		return nil, status.Error(codes.InvalidArgument, "CreateMachine needs a machine")
	}
	spec, err := d.classSpec(req.MachineClass)
	if err != nil {
		return nil, err
	}
	name := req.Machine.Name
	if existing := d.vm(name); existing != nil {
		return &driver.CreateMachineResponse{ProviderID: existing.ProviderID, NodeName: existing.NodeName}, nil
	}
	if err := d.injectedFailure("create", name, spec); err != nil {
		return nil, err
	}
	if spec.CreateLatency > 0 {
		timer := time.NewTimer(spec.CreateLatency)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, status.Error(codes.DeadlineExceeded, fmt.Sprintf("creating the VM of machine %q outlived the call: %v", name, ctx.Err()))
		case <-timer.C:
		}
	}
	now := d.config.Now()
	d.mu.Lock()
	vm, exists := d.vms[name]
	if !exists {
		vm = &VM{
			MachineName:         name,
			ClassName:           req.MachineClass.Name,
			ProviderID:          ProviderIDPrefix + req.MachineClass.Name + "/" + name,
			NodeName:            name,
			CreatedAt:           now,
			BootAt:              now.Add(spec.BootDelay),
			NeedsInitialization: spec.Initialization == "reported",
		}
		d.vms[name] = vm
	}
	response := &driver.CreateMachineResponse{ProviderID: vm.ProviderID, NodeName: vm.NodeName}
	d.mu.Unlock()
	if !exists {
		d.logger.Info("created VM", "machine", name, "providerID", vm.ProviderID)
	}
	return response, nil
}

// InitializeMachine finishes a VM of a class with initialization "reported".
func (d *Driver) InitializeMachine(_ context.Context, req *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	if req.Machine == nil {
		return nil, status.Error(codes.InvalidArgument, "InitializeMachine needs a machine")
	}
	spec, err := d.classSpec(req.MachineClass)
	if err != nil {
		return nil, err
	}
	if spec.Initialization == "unimplemented" {
		return nil, status.Error(codes.Unimplemented, "the in-memory provider does not implement InitializeMachine for this class")
	}
	if err := d.injectedFailure("initialize", req.Machine.Name, spec); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	vm := d.lookup(req.Machine)
	if vm == nil {
		return nil, status.Error(codes.NotFound, fmt.Sprintf("no VM backs machine %q", req.Machine.Name))
	}
	vm.NeedsInitialization = false
	return &driver.InitializeMachineResponse{ProviderID: vm.ProviderID, NodeName: vm.NodeName}, nil
}

// DeleteMachine deletes the VM of a machine; a machine without one is fine.
func (d *Driver) DeleteMachine(_ context.Context, req *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	if req.Machine == nil {
		return nil, status.Error(codes.InvalidArgument, "DeleteMachine needs a machine")
	}
	if err := checkProvider(req.MachineClass); err != nil {
		return nil, err
	}
	// A class broken after its machines were created must not keep them from being deleted:
	// only a valid spec's injected failures apply.
	if spec, err := ParseSpec(req.MachineClass); err == nil {
		if err := d.injectedFailure("delete", req.Machine.Name, spec); err != nil {
			return nil, err
		}
	}
	d.mu.Lock()
	vm := d.lookup(req.Machine)
	if vm != nil {
		delete(d.vms, vm.MachineName)
	}
	d.mu.Unlock()
	if vm != nil {
		// Its Node stops heartbeating; deleting the Node object is the controller's job.
		d.nodes.forget(vm.NodeName)
		d.logger.Info("deleted VM", "machine", vm.MachineName, "providerID", vm.ProviderID)
	}
	return &driver.DeleteMachineResponse{}, nil
}

// GetMachineStatus answers NotFound for a machine without a VM, and Uninitialized (with the
// VM's status) for a VM waiting for InitializeMachine.
func (d *Driver) GetMachineStatus(_ context.Context, req *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	if req.Machine == nil {
		return nil, status.Error(codes.InvalidArgument, "GetMachineStatus needs a machine")
	}
	if err := checkProvider(req.MachineClass); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	vm := d.lookup(req.Machine)
	if vm == nil {
		return nil, status.Error(codes.NotFound, fmt.Sprintf("no VM backs machine %q", req.Machine.Name))
	}
	response := &driver.GetMachineStatusResponse{ProviderID: vm.ProviderID, NodeName: vm.NodeName}
	if vm.NeedsInitialization {
		return response, status.Error(codes.Uninitialized, fmt.Sprintf("the VM of machine %q is not initialized yet", vm.MachineName))
	}
	return response, nil
}

// ListMachines returns providerID → machine name for the VMs of the class.
func (d *Driver) ListMachines(_ context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	if err := checkProvider(req.MachineClass); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	list := map[string]string{}
	for _, vm := range d.vms {
		if vm.ClassName == req.MachineClass.Name {
			list[vm.ProviderID] = vm.MachineName
		}
	}
	return &driver.ListMachinesResponse{MachineList: list}, nil
}

// GetVolumeIDs returns the handles of the CSI volumes of the in-memory provider.
func (d *Driver) GetVolumeIDs(_ context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	var ids []string
	for _, spec := range req.PVSpecs {
		if spec != nil && spec.CSI != nil && spec.CSI.Driver == CSIDriver && spec.CSI.VolumeHandle != "" {
			ids = append(ids, spec.CSI.VolumeHandle)
		}
	}
	return &driver.GetVolumeIDsResponse{VolumeIDs: ids}, nil
}

// classSpec checks the class's provider and validates its providerSpec (creation and
// initialisation; the other methods only check the provider).
func (d *Driver) classSpec(class *v1alpha1.MachineClass) (Spec, error) {
	if err := checkProvider(class); err != nil {
		return Spec{}, err
	}
	return ParseSpec(class)
}

func checkProvider(class *v1alpha1.MachineClass) error {
	if class == nil {
		return status.Error(codes.InvalidArgument, "the request carries no machine class")
	}
	if class.Provider != ProviderName {
		return status.Error(codes.InvalidArgument, fmt.Sprintf("machineClass.provider: %q is not served by this driver (it serves %q)", class.Provider, ProviderName))
	}
	return nil
}

// injectedFailure serves the failures a class injects, counting them per machine.
func (d *Driver) injectedFailure(method, machine string, spec Spec) error {
	failure, ok := spec.Failures[method]
	if !ok || failure.Times == 0 {
		return nil
	}
	key := method + "/" + machine
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.failed[key] >= failure.Times {
		return nil
	}
	d.failed[key]++
	return status.Error(failure.Code, fmt.Sprintf("injected %s failure %d of %d for machine %q", method, d.failed[key], failure.Times, machine))
}

func (d *Driver) vm(name string) *VM {
	d.mu.Lock()
	defer d.mu.Unlock()
	if vm, ok := d.vms[name]; ok {
		copied := *vm
		return &copied
	}
	return nil
}

// lookup finds a machine's VM by providerID, then by name (the caller holds mu). A deletion
// may carry only the providerID (an orphan VM found by ListMachines).
func (d *Driver) lookup(machine *v1alpha1.Machine) *VM {
	if id := machine.Spec.ProviderID; id != "" {
		for _, vm := range d.vms {
			if vm.ProviderID == id {
				return vm
			}
		}
		if strings.HasPrefix(id, ProviderIDPrefix) {
			return nil
		}
	}
	return d.vms[machine.Name]
}

// dueNodes lists the VMs whose Nodes should exist now.
func (d *Driver) dueNodes(now time.Time) []VM {
	d.mu.Lock()
	defer d.mu.Unlock()
	var due []VM
	for _, vm := range d.vms {
		if !vm.NeedsInitialization && !now.Before(vm.BootAt) {
			due = append(due, *vm)
		}
	}
	return due
}

// nodeAddress is the one address a Node of the in-memory provider reports.
func nodeAddress(vm VM) []corev1.NodeAddress {
	return []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: vm.NodeName}}
}
