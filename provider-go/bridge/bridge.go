// Package bridge serves an upstream machine-controller-manager driver (the driver.Driver
// interface every Gardener provider implements) over the project's gRPC driver contract, so
// that our machine controller drives it.
//
// Requests carry the Machine, MachineClass and Secret as JSON; they are decoded into upstream's
// own types, so the wrapped driver sees exactly what upstream's machine-controller would hand
// it. Errors keep upstream's codes and messages (see errors.go), and the contract's methods that
// upstream's interface lacks answer as docs/provider-authoring.md#bring-your-existing-go-provider
// describes.
package bridge

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/gardener/machine-controller-manager/pkg/util/provider/driver"
	"google.golang.org/grpc"

	"github.com/mcm-rs/machine-controller-manager/provider-go/driverpb"
)

// Options describe the wrapped provider.
type Options struct {
	// ProviderName is the MachineClass `provider` value the driver serves (e.g. "Azure").
	ProviderName string
	// DriverVersion is reported by GetCapabilities, for the manager's logs.
	DriverVersion string
	// InitializeMachineUnimplemented declares that the driver's InitializeMachine answers
	// Unimplemented (most providers do): GetCapabilities then leaves the method out. A driver
	// that answers Unimplemented without this being set is noticed on its first answer.
	InitializeMachineUnimplemented bool
	// Logger receives one line per failed call; slog.Default() when nil.
	Logger *slog.Logger
}

// Serve serves drv on endpoint until ctx ends. The endpoint is `unix:///path/to.sock` or
// `tcp://host:port` (a bare `host:port` is TCP), the same forms the manager's
// --driver-endpoint takes. A stale socket file left by an earlier run is replaced.
func Serve(ctx context.Context, drv driver.Driver, endpoint string, options Options) error {
	listener, err := Listen(endpoint)
	if err != nil {
		return err
	}
	server := grpc.NewServer()
	driverpb.RegisterDriverServer(server, NewServer(drv, options))
	stopped := make(chan struct{})
	go func() {
		select {
		case <-ctx.Done():
			server.GracefulStop()
		case <-stopped:
		}
	}()
	err = server.Serve(listener)
	close(stopped)
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("serve the driver contract on %s: %w", endpoint, err)
	}
	return nil
}

// Listen opens the listener of an endpoint.
func Listen(endpoint string) (net.Listener, error) {
	network, address, err := ParseEndpoint(endpoint)
	if err != nil {
		return nil, err
	}
	if network == "unix" {
		if err := os.MkdirAll(filepath.Dir(address), 0o755); err != nil {
			return nil, fmt.Errorf("create the socket's directory: %w", err)
		}
		if err := os.Remove(address); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("remove the stale socket %s: %w", address, err)
		}
	}
	listener, err := net.Listen(network, address)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", endpoint, err)
	}
	return listener, nil
}

// ParseEndpoint splits an endpoint into a network ("unix" or "tcp") and an address.
func ParseEndpoint(endpoint string) (network, address string, err error) {
	switch {
	case strings.HasPrefix(endpoint, "unix://"):
		path := strings.TrimPrefix(endpoint, "unix://")
		if !strings.HasPrefix(path, "/") {
			return "", "", fmt.Errorf("invalid driver endpoint %q: the socket path must be absolute (unix:///path/to.sock)", endpoint)
		}
		return "unix", path, nil
	case strings.HasPrefix(endpoint, "tcp://"):
		address = strings.TrimPrefix(endpoint, "tcp://")
	case strings.Contains(endpoint, "://"):
		return "", "", fmt.Errorf("invalid driver endpoint %q: expected unix:///path/to.sock or tcp://host:port", endpoint)
	default:
		address = endpoint
	}
	if _, _, err := net.SplitHostPort(address); err != nil {
		return "", "", fmt.Errorf("invalid driver endpoint %q: %v (expected unix:///path/to.sock or tcp://host:port)", endpoint, err)
	}
	return "tcp", address, nil
}
