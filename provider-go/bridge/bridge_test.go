package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/codes"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/machinecodes/status"
	"google.golang.org/grpc"
	grpccodes "google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	corev1 "k8s.io/api/core/v1"

	"github.com/mcm-rs/machine-controller-manager/provider-go/driverpb"
)

// recordingDriver answers from its fields and keeps the last request of each method.
type recordingDriver struct {
	create       *driver.CreateMachineRequest
	createResp   *driver.CreateMachineResponse
	status       *driver.GetMachineStatusResponse
	list         *driver.ListMachinesRequest
	volumes      *driver.GetVolumeIDsRequest
	err          error
	initErr      error
	panicMessage string
}

func (d *recordingDriver) CreateMachine(_ context.Context, req *driver.CreateMachineRequest) (*driver.CreateMachineResponse, error) {
	if d.panicMessage != "" {
		panic(d.panicMessage)
	}
	d.create = req
	return d.createResp, d.err
}

func (d *recordingDriver) InitializeMachine(context.Context, *driver.InitializeMachineRequest) (*driver.InitializeMachineResponse, error) {
	if d.initErr != nil {
		return nil, d.initErr
	}
	return &driver.InitializeMachineResponse{ProviderID: "fake:///m1", NodeName: "n1"}, nil
}

func (d *recordingDriver) DeleteMachine(context.Context, *driver.DeleteMachineRequest) (*driver.DeleteMachineResponse, error) {
	return &driver.DeleteMachineResponse{LastKnownState: "gone"}, d.err
}

func (d *recordingDriver) GetMachineStatus(context.Context, *driver.GetMachineStatusRequest) (*driver.GetMachineStatusResponse, error) {
	return d.status, d.err
}

func (d *recordingDriver) ListMachines(_ context.Context, req *driver.ListMachinesRequest) (*driver.ListMachinesResponse, error) {
	d.list = req
	return &driver.ListMachinesResponse{MachineList: map[string]string{"fake:///m1": "m1"}}, d.err
}

func (d *recordingDriver) GetVolumeIDs(_ context.Context, req *driver.GetVolumeIDsRequest) (*driver.GetVolumeIDsResponse, error) {
	d.volumes = req
	return &driver.GetVolumeIDsResponse{VolumeIDs: []string{"vol-1"}}, d.err
}

// serve starts the bridge for drv on an in-memory connection and returns a client.
func serve(t *testing.T, drv driver.Driver, options Options) driverpb.DriverClient {
	t.Helper()
	if options.Logger == nil {
		options.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	listener := bufconn.Listen(1 << 20)
	server := grpc.NewServer()
	driverpb.RegisterDriverServer(server, NewServer(drv, options))
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return listener.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return driverpb.NewDriverClient(conn)
}

const machineJSON = `{"apiVersion":"machine.sapcloud.io/v1alpha1","kind":"Machine",
	"metadata":{"name":"m1","namespace":"shoot--a","labels":{"node":"n1"}},
	"spec":{"class":{"kind":"MachineClass","name":"c1"},"providerID":"fake:///m1"}}`

const classJSON = `{"apiVersion":"machine.sapcloud.io/v1alpha1","kind":"MachineClass",
	"metadata":{"name":"c1","namespace":"shoot--a"},"provider":"Fake",
	"providerSpec":{"size":"large","tags":{"team":"a"}},
	"secretRef":{"name":"s1","namespace":"shoot--a"}}`

// The Secret as the API server serves it (data base64) with a stringData entry on top.
const secretJSON = `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s1"},
	"data":{"userData":"I2Nsb3VkLWNvbmZpZw==","region":"ZXUtMQ=="},"stringData":{"region":"eu-2"}}`

func TestCreateMachineDecodesUpstreamTypesAndEncodesTheResponse(t *testing.T) {
	drv := &recordingDriver{createResp: &driver.CreateMachineResponse{
		ProviderID: "fake:///m1", NodeName: "n1", LastKnownState: "state-1",
		Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.1"}},
	}}
	client := serve(t, drv, Options{ProviderName: "Fake"})
	response, err := client.CreateMachine(context.Background(), &driverpb.CreateMachineRequest{
		Machine: []byte(machineJSON), MachineClass: []byte(classJSON), Secret: []byte(secretJSON),
	})
	if err != nil {
		t.Fatal(err)
	}
	if response.GetProviderId() != "fake:///m1" || response.GetNodeName() != "n1" || response.GetLastKnownState() != "state-1" {
		t.Fatalf("response = %v", response)
	}
	if len(response.GetAddresses()) != 1 || response.GetAddresses()[0].GetType() != "InternalIP" || response.GetAddresses()[0].GetAddress() != "10.0.0.1" {
		t.Fatalf("addresses = %v", response.GetAddresses())
	}
	req := drv.create
	if req.Machine.Name != "m1" || req.Machine.Namespace != "shoot--a" || req.Machine.Spec.ProviderID != "fake:///m1" || req.Machine.Labels["node"] != "n1" {
		t.Fatalf("machine = %+v", req.Machine)
	}
	if req.MachineClass.Provider != "Fake" || !strings.Contains(string(req.MachineClass.ProviderSpec.Raw), `"size":"large"`) || req.MachineClass.SecretRef.Name != "s1" {
		t.Fatalf("class = %+v", req.MachineClass)
	}
	if string(req.Secret.Data["userData"]) != "#cloud-config" || string(req.Secret.Data["region"]) != "eu-2" || req.Secret.StringData != nil {
		t.Fatalf("secret data = %q, stringData = %v", req.Secret.Data, req.Secret.StringData)
	}
}

func TestAnEmptySecretIsAnEmptySecretNotNil(t *testing.T) {
	drv := &recordingDriver{}
	client := serve(t, drv, Options{ProviderName: "Fake"})
	if _, err := client.ListMachines(context.Background(), &driverpb.ListMachinesRequest{MachineClass: []byte(classJSON)}); err != nil {
		t.Fatal(err)
	}
	if drv.list.Secret == nil || drv.list.MachineClass.Name != "c1" {
		t.Fatalf("list request = %+v", drv.list)
	}
}

func TestMalformedObjectsAreInvalidArgumentNamingTheObject(t *testing.T) {
	client := serve(t, &recordingDriver{}, Options{ProviderName: "Fake"})
	cases := []struct {
		name    string
		request *driverpb.CreateMachineRequest
		want    string
	}{
		{"machine", &driverpb.CreateMachineRequest{Machine: []byte(`{"metadata":`), MachineClass: []byte(classJSON)}, "decode the machine JSON"},
		{"class", &driverpb.CreateMachineRequest{Machine: []byte(machineJSON), MachineClass: []byte(`[]`)}, "decode the machine class JSON"},
		{"secret", &driverpb.CreateMachineRequest{Machine: []byte(machineJSON), MachineClass: []byte(classJSON), Secret: []byte(`{"data":{"k":"***"}}`)}, "decode the secret JSON"},
		{"no machine", &driverpb.CreateMachineRequest{MachineClass: []byte(classJSON)}, "carries no machine"},
		{"no class", &driverpb.CreateMachineRequest{Machine: []byte(machineJSON)}, "carries no machine class"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := client.CreateMachine(context.Background(), tc.request)
			got := grpcstatus.Convert(err)
			if got.Code() != grpccodes.InvalidArgument || !strings.Contains(got.Message(), tc.want) {
				t.Fatalf("got %v %q, want InvalidArgument containing %q", got.Code(), got.Message(), tc.want)
			}
			if code := machineCode(t, err); code != codes.InvalidArgument {
				t.Fatalf("detail code = %v", code)
			}
		})
	}
}

// machineCode reads the MachineErrorDetail of a status, failing when there is none.
func machineCode(t *testing.T, err error) codes.Code {
	t.Helper()
	for _, detail := range grpcstatus.Convert(err).Details() {
		if d, ok := detail.(*driverpb.MachineErrorDetail); ok {
			if codes.Code(d.GetCode()).String() != d.GetCodeName() {
				t.Fatalf("detail name %q does not match code %d", d.GetCodeName(), d.GetCode())
			}
			return codes.Code(d.GetCode())
		}
	}
	t.Fatalf("no MachineErrorDetail in %v", err)
	return codes.OK
}

// Every machine code crosses the wire with upstream's message unchanged: as the gRPC code of
// the same number and in the detail, and Uninitialized (outside gRPC's range) as
// FailedPrecondition with the detail saying Uninitialized.
func TestEveryMachineCodeCrossesTheWire(t *testing.T) {
	for code := codes.Canceled; code <= codes.Uninitialized; code++ {
		t.Run(code.String(), func(t *testing.T) {
			drv := &recordingDriver{err: status.Error(code, "upstream says "+code.String())}
			client := serve(t, drv, Options{ProviderName: "Fake"})
			_, err := client.DeleteMachine(context.Background(), &driverpb.DeleteMachineRequest{
				Machine: []byte(machineJSON), MachineClass: []byte(classJSON),
			})
			got := grpcstatus.Convert(err)
			wantGRPC := grpccodes.Code(code)
			if code == codes.Uninitialized {
				wantGRPC = grpccodes.FailedPrecondition
			}
			if got.Code() != wantGRPC || got.Message() != "upstream says "+code.String() {
				t.Fatalf("got %v %q", got.Code(), got.Message())
			}
			if detail := machineCode(t, err); detail != code {
				t.Fatalf("detail = %v, want %v", detail, code)
			}
		})
	}
}

// Errors that are not upstream's status are read the way upstream's controller reads them.
func TestOtherErrorsAreReadAsUpstreamReadsThem(t *testing.T) {
	cases := []struct {
		name        string
		err         error
		wantCode    codes.Code
		wantMessage string
	}{
		{"plain error", errors.New("cloud API timed out"), codes.Unknown, "cloud API timed out"},
		{"wrapped status", fmt.Errorf("create VM: %w", status.Error(codes.ResourceExhausted, "quota exceeded")), codes.ResourceExhausted, "quota exceeded"},
		{"gRPC status", grpcstatus.Error(grpccodes.NotFound, "vm gone"), codes.Unknown, "rpc error: code = NotFound desc = vm gone"},
		{"status with OK", status.Error(codes.OK, "odd"), codes.Unknown, "odd"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			client := serve(t, &recordingDriver{err: tc.err}, Options{ProviderName: "Fake"})
			_, err := client.DeleteMachine(context.Background(), &driverpb.DeleteMachineRequest{
				Machine: []byte(machineJSON), MachineClass: []byte(classJSON),
			})
			if code := machineCode(t, err); code != tc.wantCode {
				t.Fatalf("code = %v, want %v", code, tc.wantCode)
			}
			if message := grpcstatus.Convert(err).Message(); message != tc.wantMessage {
				t.Fatalf("message = %q, want %q", message, tc.wantMessage)
			}
		})
	}
}

func TestUninitializedCarriesTheMachineStatus(t *testing.T) {
	drv := &recordingDriver{
		status: &driver.GetMachineStatusResponse{ProviderID: "fake:///m1", NodeName: "n1"},
		err:    status.Error(codes.Uninitialized, "VM not initialized"),
	}
	client := serve(t, drv, Options{ProviderName: "Fake"})
	_, err := client.GetMachineStatus(context.Background(), &driverpb.GetMachineStatusRequest{
		Machine: []byte(machineJSON), MachineClass: []byte(classJSON),
	})
	if code := machineCode(t, err); code != codes.Uninitialized {
		t.Fatalf("code = %v", code)
	}
	var found *driverpb.GetMachineStatusResponse
	for _, detail := range grpcstatus.Convert(err).Details() {
		if d, ok := detail.(*driverpb.GetMachineStatusResponse); ok {
			found = d
		}
	}
	if found == nil || found.GetProviderId() != "fake:///m1" || found.GetNodeName() != "n1" {
		t.Fatalf("status response detail = %v", found)
	}
}

func TestNotFoundStatusHasNoResponseDetail(t *testing.T) {
	client := serve(t, &recordingDriver{err: status.Error(codes.NotFound, "no VM")}, Options{ProviderName: "Fake"})
	_, err := client.GetMachineStatus(context.Background(), &driverpb.GetMachineStatusRequest{
		Machine: []byte(machineJSON), MachineClass: []byte(classJSON),
	})
	if code := machineCode(t, err); code != codes.NotFound {
		t.Fatalf("code = %v", code)
	}
	if details := grpcstatus.Convert(err).Details(); len(details) != 1 {
		t.Fatalf("details = %v", details)
	}
}

func TestCapabilitiesUpdateMachineAndInitializeMachine(t *testing.T) {
	ctx := context.Background()
	drv := &recordingDriver{}
	client := serve(t, drv, Options{ProviderName: "Fake", DriverVersion: "v1.2.3"})
	capabilities, err := client.GetCapabilities(ctx, &driverpb.GetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if capabilities.GetProviderName() != "Fake" || capabilities.GetDriverVersion() != "v1.2.3" || len(capabilities.GetHotUpdatablePaths()) != 0 {
		t.Fatalf("capabilities = %v", capabilities)
	}
	if !hasMethod(capabilities, driverpb.Method_METHOD_INITIALIZE_MACHINE) || hasMethod(capabilities, driverpb.Method_METHOD_UPDATE_MACHINE) {
		t.Fatalf("methods = %v", capabilities.GetMethods())
	}
	_, err = client.UpdateMachine(ctx, &driverpb.UpdateMachineRequest{ProviderId: "fake:///m1"})
	if grpcstatus.Code(err) != grpccodes.Unimplemented || machineCode(t, err) != codes.Unimplemented {
		t.Fatalf("UpdateMachine = %v", err)
	}

	// A driver whose InitializeMachine is Unimplemented: the answer passes through (the manager
	// skips the step, as upstream's controller does) and the capability disappears.
	drv.initErr = status.Error(codes.Unimplemented, "Azure Provider does not yet implement InitializeMachine")
	_, err = client.InitializeMachine(ctx, &driverpb.InitializeMachineRequest{Machine: []byte(machineJSON), MachineClass: []byte(classJSON)})
	if grpcstatus.Code(err) != grpccodes.Unimplemented || grpcstatus.Convert(err).Message() != "Azure Provider does not yet implement InitializeMachine" {
		t.Fatalf("InitializeMachine = %v", err)
	}
	capabilities, err = client.GetCapabilities(ctx, &driverpb.GetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if hasMethod(capabilities, driverpb.Method_METHOD_INITIALIZE_MACHINE) {
		t.Fatalf("InitializeMachine still listed after Unimplemented: %v", capabilities.GetMethods())
	}

	declared := serve(t, &recordingDriver{}, Options{ProviderName: "Fake", InitializeMachineUnimplemented: true})
	capabilities, err = declared.GetCapabilities(ctx, &driverpb.GetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if hasMethod(capabilities, driverpb.Method_METHOD_INITIALIZE_MACHINE) || !hasMethod(capabilities, driverpb.Method_METHOD_CREATE_MACHINE) {
		t.Fatalf("methods = %v", capabilities.GetMethods())
	}
}

func TestValidateMachineClassIsUnimplementedAndNotAdvertised(t *testing.T) {
	ctx := context.Background()
	client := serve(t, &recordingDriver{}, Options{ProviderName: "Fake"})
	capabilities, err := client.GetCapabilities(ctx, &driverpb.GetCapabilitiesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if hasMethod(capabilities, driverpb.Method_METHOD_VALIDATE_MACHINE_CLASS) {
		t.Fatalf("ValidateMachineClass advertised: %v", capabilities.GetMethods())
	}
	_, err = client.ValidateMachineClass(ctx, &driverpb.ValidateMachineClassRequest{MachineClass: []byte(classJSON)})
	if grpcstatus.Code(err) != grpccodes.Unimplemented || machineCode(t, err) != codes.Unimplemented {
		t.Fatalf("ValidateMachineClass = %v", err)
	}
}

func hasMethod(capabilities *driverpb.GetCapabilitiesResponse, method driverpb.Method) bool {
	for _, m := range capabilities.GetMethods() {
		if m == method {
			return true
		}
	}
	return false
}

func TestADriverPanicIsAnInternalErrorAndTheServerLives(t *testing.T) {
	drv := &recordingDriver{panicMessage: "nil map"}
	client := serve(t, drv, Options{ProviderName: "Fake"})
	_, err := client.CreateMachine(context.Background(), &driverpb.CreateMachineRequest{Machine: []byte(machineJSON), MachineClass: []byte(classJSON)})
	if machineCode(t, err) != codes.Internal || !strings.Contains(grpcstatus.Convert(err).Message(), "panicked in CreateMachine: nil map") {
		t.Fatalf("err = %v", err)
	}
	if _, err := client.ListMachines(context.Background(), &driverpb.ListMachinesRequest{MachineClass: []byte(classJSON)}); err != nil {
		t.Fatalf("the server did not survive: %v", err)
	}
}

func TestANilResponseWithoutErrorIsInternal(t *testing.T) {
	client := serve(t, &recordingDriver{}, Options{ProviderName: "Fake"})
	_, err := client.CreateMachine(context.Background(), &driverpb.CreateMachineRequest{Machine: []byte(machineJSON), MachineClass: []byte(classJSON)})
	if machineCode(t, err) != codes.Internal {
		t.Fatalf("err = %v", err)
	}
}

func TestVolumeSpecsAreDecoded(t *testing.T) {
	drv := &recordingDriver{}
	client := serve(t, drv, Options{ProviderName: "Fake"})
	response, err := client.GetVolumeIDs(context.Background(), &driverpb.GetVolumeIDsRequest{PvSpecs: [][]byte{
		[]byte(`{"csi":{"driver":"disk.csi.azure.com","volumeHandle":"/subscriptions/x/disks/d1"}}`),
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(response.GetVolumeIds()) != 1 || drv.volumes.PVSpecs[0].CSI.VolumeHandle != "/subscriptions/x/disks/d1" {
		t.Fatalf("response = %v, request = %+v", response, drv.volumes)
	}
	_, err = client.GetVolumeIDs(context.Background(), &driverpb.GetVolumeIDsRequest{PvSpecs: [][]byte{[]byte(`nope`)}})
	if machineCode(t, err) != codes.InvalidArgument || !strings.Contains(grpcstatus.Convert(err).Message(), "persistent volume spec #0") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseEndpoint(t *testing.T) {
	cases := []struct{ in, network, address, err string }{
		{"unix:///run/mcm/driver.sock", "unix", "/run/mcm/driver.sock", ""},
		{"tcp://127.0.0.1:9000", "tcp", "127.0.0.1:9000", ""},
		{"127.0.0.1:9000", "tcp", "127.0.0.1:9000", ""},
		{"unix://relative.sock", "", "", "must be absolute"},
		{"http://x:1", "", "", "expected unix:///path/to.sock"},
		{"tcp://nohost", "", "", "missing port"},
	}
	for _, tc := range cases {
		network, address, err := ParseEndpoint(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%s: err = %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || network != tc.network || address != tc.address {
			t.Errorf("%s: got %s %s %v", tc.in, network, address, err)
		}
	}
}

// Serve listens on a Unix socket (replacing a stale file) and stops when its context ends.
func TestServeOnAUnixSocketUntilCancelled(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "sub", "driver.sock")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, &recordingDriver{}, "unix://"+socket, Options{ProviderName: "Fake"}) }()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	capabilities, err := driverpb.NewDriverClient(conn).GetCapabilities(ctx, &driverpb.GetCapabilitiesRequest{}, grpc.WaitForReady(true))
	if err != nil || capabilities.GetProviderName() != "Fake" {
		t.Fatalf("GetCapabilities = %v, %v", capabilities, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Serve returned %v", err)
	}
}
