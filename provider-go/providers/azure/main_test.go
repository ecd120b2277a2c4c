package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gardener/machine-controller-manager-provider-azure/pkg/azure/access"
	"github.com/gardener/machine-controller-manager-provider-azure/pkg/azure/provider"
	"golang.org/x/mod/modfile"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/mcm-rs/machine-controller-manager/provider-go/bridge"
	"github.com/mcm-rs/machine-controller-manager/provider-go/driverpb"
)

// The real Azure provider code runs behind the bridge: its capabilities, and its own
// validation of a providerSpec (which runs before any call to Azure) reaching the client as
// InvalidArgument with the provider's message.
func TestTheAzureProviderAnswersThroughTheBridge(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	socket := filepath.Join(t.TempDir(), "driver.sock")
	served := make(chan error, 1)
	go func() {
		served <- bridge.Serve(ctx, provider.NewDefaultDriver(access.NewDefaultAccessFactory()), "unix://"+socket,
			bridge.Options{ProviderName: "Azure", InitializeMachineUnimplemented: true})
	}()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	client := driverpb.NewDriverClient(conn)

	capabilities, err := client.GetCapabilities(ctx, &driverpb.GetCapabilitiesRequest{}, grpc.WaitForReady(true))
	if err != nil {
		t.Fatal(err)
	}
	if capabilities.GetProviderName() != "Azure" {
		t.Fatalf("provider = %q", capabilities.GetProviderName())
	}
	for _, method := range capabilities.GetMethods() {
		if method == driverpb.Method_METHOD_INITIALIZE_MACHINE || method == driverpb.Method_METHOD_UPDATE_MACHINE {
			t.Fatalf("methods = %v", capabilities.GetMethods())
		}
	}

	machine := `{"metadata":{"name":"m1","namespace":"shoot--a"},"spec":{"class":{"name":"c1"}}}`
	class := `{"metadata":{"name":"c1","namespace":"shoot--a"},"provider":"Azure","providerSpec":{"location":""}}`
	secret := `{"data":{"userData":"I2Nsb3VkLWNvbmZpZw=="}}`
	_, err = client.CreateMachine(ctx, &driverpb.CreateMachineRequest{
		Machine: []byte(machine), MachineClass: []byte(class), Secret: []byte(secret),
	})
	if status.Code(err) != codes.InvalidArgument {
		t.Fatalf("CreateMachine with an invalid providerSpec = %v, want InvalidArgument", err)
	}
	if message := status.Convert(err).Message(); !strings.Contains(message, "validation") {
		t.Fatalf("the provider's own message is lost: %q", message)
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// providerVersion (reported in GetCapabilities) is the release go.mod pins.
func TestProviderVersionMatchesGoMod(t *testing.T) {
	data, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	file, err := modfile.Parse("go.mod", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, require := range file.Require {
		if require.Mod.Path == "github.com/gardener/machine-controller-manager-provider-azure" {
			if require.Mod.Version != providerVersion {
				t.Fatalf("go.mod pins %s, providerVersion says %s", require.Mod.Version, providerVersion)
			}
			return
		}
	}
	t.Fatal("go.mod does not require the Azure provider")
}
