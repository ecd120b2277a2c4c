package memdriver

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gardener/machine-controller-manager/pkg/apis/machine/v1alpha1"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
)

func class(name, spec string) *v1alpha1.MachineClass {
	return &v1alpha1.MachineClass{
		ObjectMeta:   metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Provider:     ProviderName,
		ProviderSpec: runtime.RawExtension{Raw: []byte(spec)},
	}
}

func machine(name, providerID string) *v1alpha1.Machine {
	return &v1alpha1.Machine{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
		Spec:       v1alpha1.MachineSpec{ProviderID: providerID},
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func codeOf(err error) codes.Code {
	s, _ := status.FromError(err)
	return s.Code()
}

func TestSpecErrorsNameTheField(t *testing.T) {
	cases := map[string]string{
		`{"bootDelay": 5}`:            "providerSpec.bootDelay",
		`{"createLatency": "soon"}`:   "providerSpec.createLatency",
		`{"initialization": "later"}`: "providerSpec.initialization",
		`{"colour": "blue"}`:          "providerSpec.colour",
		`{"failures": {"reboot": {"code": "Internal", "times": 1}}}`:  "providerSpec.failures.reboot",
		`{"failures": {"create": {"code": "Sometimes", "times": 1}}}`: "providerSpec.failures.create.code",
		`{"failures": {"create": {"code": "Internal", "times": -1}}}`: "providerSpec.failures.create.times",
		`[1, 2]`: "providerSpec",
	}
	for spec, field := range cases {
		_, err := ParseSpec(class("c", spec))
		if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), field+":") {
			t.Errorf("%s: err = %v, want InvalidArgument naming %s", spec, err, field)
		}
	}
	spec, err := ParseSpec(class("c", `{"createLatency":"250ms","bootDelay":"2s","initialization":"reported","failures":{"delete":{"code":"Unavailable","times":3}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if spec.CreateLatency != 250*time.Millisecond || spec.BootDelay != 2*time.Second || spec.Initialization != "reported" || spec.Failures["delete"] != (Failure{Code: codes.Unavailable, Times: 3}) {
		t.Fatalf("spec = %+v", spec)
	}
}

func TestCreateIsIdempotentAndListIsPerClass(t *testing.T) {
	ctx := context.Background()
	d := New(Config{Logger: quiet()})
	first, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m1", ""), MachineClass: class("a", `{}`)})
	if err != nil {
		t.Fatal(err)
	}
	second, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m1", first.ProviderID), MachineClass: class("a", `{}`)})
	if err != nil || second.ProviderID != first.ProviderID || second.NodeName != "m1" {
		t.Fatalf("second create = %+v, %v (first %+v)", second, err, first)
	}
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m2", ""), MachineClass: class("b", `{}`)}); err != nil {
		t.Fatal(err)
	}
	list, err := d.ListMachines(ctx, &driver.ListMachinesRequest{MachineClass: class("a", `{}`)})
	if err != nil || len(list.MachineList) != 1 || list.MachineList[first.ProviderID] != "m1" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	// Deleting by providerID alone (an orphan) and deleting twice are fine.
	orphan := &v1alpha1.Machine{ObjectMeta: metav1.ObjectMeta{Name: "unknown-name"}, Spec: v1alpha1.MachineSpec{ProviderID: first.ProviderID}}
	for range 2 {
		if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: orphan, MachineClass: class("a", `{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m1", ""), MachineClass: class("a", `{}`)}); codeOf(err) != codes.NotFound {
		t.Fatalf("status after delete = %v", err)
	}
	if vms := d.VMs(); len(vms) != 1 || vms[0].MachineName != "m2" {
		t.Fatalf("VMs = %+v", vms)
	}
}

func TestWrongProviderIsInvalidArgument(t *testing.T) {
	c := class("a", `{}`)
	c.Provider = "AWS"
	_, err := New(Config{Logger: quiet()}).CreateMachine(context.Background(), &driver.CreateMachineRequest{Machine: machine("m1", ""), MachineClass: c})
	if codeOf(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "machineClass.provider") {
		t.Fatalf("err = %v", err)
	}
}

func TestInjectedFailuresCountPerMachine(t *testing.T) {
	ctx := context.Background()
	d := New(Config{Logger: quiet()})
	c := class("a", `{"failures":{"create":{"code":"ResourceExhausted","times":2}}}`)
	for attempt := 1; attempt <= 2; attempt++ {
		_, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m1", ""), MachineClass: c})
		if codeOf(err) != codes.ResourceExhausted {
			t.Fatalf("attempt %d: err = %v", attempt, err)
		}
	}
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m1", ""), MachineClass: c}); err != nil {
		t.Fatalf("third attempt: %v", err)
	}
	if _, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m2", ""), MachineClass: c}); codeOf(err) != codes.ResourceExhausted {
		t.Fatalf("another machine's first attempt: %v", err)
	}
}

func TestACreateThatOutlivesItsDeadlineLeavesNoVM(t *testing.T) {
	d := New(Config{Logger: quiet()})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m1", ""), MachineClass: class("a", `{"createLatency":"5s"}`)})
	if codeOf(err) != codes.DeadlineExceeded {
		t.Fatalf("err = %v", err)
	}
	if vms := d.VMs(); len(vms) != 0 {
		t.Fatalf("VMs = %+v", vms)
	}
}

func TestReportedInitialization(t *testing.T) {
	ctx := context.Background()
	d := New(Config{Logger: quiet()})
	c := class("a", `{"initialization":"reported"}`)
	created, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m1", ""), MachineClass: c})
	if err != nil {
		t.Fatal(err)
	}
	if due := d.dueNodes(time.Now()); len(due) != 0 {
		t.Fatalf("an uninitialised VM's node is due: %+v", due)
	}
	response, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m1", created.ProviderID), MachineClass: c})
	if codeOf(err) != codes.Uninitialized || response == nil || response.ProviderID != created.ProviderID {
		t.Fatalf("status = %+v, %v", response, err)
	}
	if _, err := d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: machine("m1", created.ProviderID), MachineClass: c}); err != nil {
		t.Fatal(err)
	}
	if _, err := d.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m1", created.ProviderID), MachineClass: c}); err != nil {
		t.Fatalf("status after initialisation: %v", err)
	}
	_, err = d.InitializeMachine(ctx, &driver.InitializeMachineRequest{Machine: machine("m1", ""), MachineClass: class("a", `{"initialization":"unimplemented"}`)})
	if codeOf(err) != codes.Unimplemented {
		t.Fatalf("unimplemented initialisation: %v", err)
	}
}

func TestVolumeIDsOfOwnCSIDriverOnly(t *testing.T) {
	response, err := New(Config{Logger: quiet()}).GetVolumeIDs(context.Background(), &driver.GetVolumeIDsRequest{PVSpecs: []*corev1.PersistentVolumeSpec{
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: CSIDriver, VolumeHandle: "vol-1"}}},
		{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "other", VolumeHandle: "vol-2"}}},
		nil,
	}})
	if err != nil || len(response.VolumeIDs) != 1 || response.VolumeIDs[0] != "vol-1" {
		t.Fatalf("response = %+v, %v", response, err)
	}
}

// A booted VM's Node registers Ready with its providerID, its Lease is owned by the Node, and a
// deleted VM's Node stops heartbeating.
func TestNodesRegisterAndHeartbeat(t *testing.T) {
	ctx := context.Background()
	target := fake.NewClientset()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	d := New(Config{Target: target, Logger: quiet(), Now: func() time.Time { return now }, LeaseInterval: 10 * time.Second})
	created, err := d.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m1", ""), MachineClass: class("a", `{"bootDelay":"5s"}`)})
	if err != nil {
		t.Fatal(err)
	}
	d.heartbeat(ctx)
	if nodes, _ := target.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); len(nodes.Items) != 0 {
		t.Fatalf("a node registered before the boot delay: %+v", nodes.Items)
	}
	now = now.Add(5 * time.Second)
	d.heartbeat(ctx)
	node, err := target.CoreV1().Nodes().Get(ctx, "m1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node.Spec.ProviderID != created.ProviderID || node.Labels[ManagedLabel] != "true" {
		t.Fatalf("node = %+v", node)
	}
	if len(node.Status.Conditions) != 1 || node.Status.Conditions[0].Type != corev1.NodeReady || node.Status.Conditions[0].Status != corev1.ConditionTrue {
		t.Fatalf("conditions = %+v", node.Status.Conditions)
	}
	lease, err := target.CoordinationV1().Leases(LeaseNamespace).Get(ctx, "m1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !lease.Spec.RenewTime.Time.Equal(now) || len(lease.OwnerReferences) != 1 || lease.OwnerReferences[0].Kind != "Node" {
		t.Fatalf("lease = %+v", lease)
	}
	now = now.Add(10 * time.Second)
	d.heartbeat(ctx)
	lease, _ = target.CoordinationV1().Leases(LeaseNamespace).Get(ctx, "m1", metav1.GetOptions{})
	if !lease.Spec.RenewTime.Time.Equal(now) {
		t.Fatalf("lease not renewed: %v, now %v", lease.Spec.RenewTime, now)
	}
	if _, err := d.DeleteMachine(ctx, &driver.DeleteMachineRequest{Machine: machine("m1", created.ProviderID), MachineClass: class("a", `{}`)}); err != nil {
		t.Fatal(err)
	}
	renewed := now
	now = now.Add(20 * time.Second)
	d.heartbeat(ctx)
	lease, _ = target.CoordinationV1().Leases(LeaseNamespace).Get(ctx, "m1", metav1.GetOptions{})
	if !lease.Spec.RenewTime.Time.Equal(renewed) {
		t.Fatalf("a deleted VM's lease was renewed: %v", lease.Spec.RenewTime)
	}
}

func TestARestartedDriverTakesBackTheVMsOfItsNodes(t *testing.T) {
	ctx := context.Background()
	target := fake.NewClientset()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	first := New(Config{Target: target, Logger: quiet(), Now: clock})
	created, err := first.CreateMachine(ctx, &driver.CreateMachineRequest{Machine: machine("m1", ""), MachineClass: class("a", `{}`)})
	if err != nil {
		t.Fatal(err)
	}
	first.heartbeat(ctx)
	// A node of someone else is left alone.
	if _, err := target.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: corev1.NodeSpec{ProviderID: "aws:///x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	restarted := New(Config{Target: target, Logger: quiet(), Now: clock, LeaseInterval: 10 * time.Second})
	if err := restarted.recoverVMs(ctx); err != nil {
		t.Fatal(err)
	}
	vms := restarted.VMs()
	if len(vms) != 1 || vms[0].MachineName != "m1" || vms[0].ClassName != "a" || vms[0].ProviderID != created.ProviderID || vms[0].NodeName != "m1" {
		t.Fatalf("recovered VMs = %+v", vms)
	}
	status, err := restarted.GetMachineStatus(ctx, &driver.GetMachineStatusRequest{Machine: machine("m1", created.ProviderID), MachineClass: class("a", `{}`)})
	if err != nil || status.ProviderID != created.ProviderID {
		t.Fatalf("GetMachineStatus after the restart = %+v, %v", status, err)
	}
	now = now.Add(10 * time.Second)
	restarted.heartbeat(ctx)
	lease, err := target.CoordinationV1().Leases(LeaseNamespace).Get(ctx, "m1", metav1.GetOptions{})
	if err != nil || !lease.Spec.RenewTime.Time.Equal(now) {
		t.Fatalf("the recovered node's lease was not renewed: %+v, %v", lease, err)
	}
}
