// Command mcm-provider-azure serves Gardener's Azure provider through the bridge, as a sidecar
// of our machine-controller-manager (docs/provider-authoring.md#bring-your-existing-go-provider).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/gardener/machine-controller-manager-provider-azure/pkg/azure/access"
	"github.com/gardener/machine-controller-manager-provider-azure/pkg/azure/provider"

	"github.com/mcm-rs/machine-controller-manager/provider-go/bridge"
)

func main() {
	endpoint := flag.String("endpoint", "unix:///run/mcm/driver.sock", "where to serve the driver contract: unix:///path/to.sock or tcp://host:port")
	metricsAddress := flag.String("metrics-address", "", "host:port of /healthz and /metrics (the provider's cloud API metrics); none when empty")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if *metricsAddress != "" {
		go func() {
			if err := bridge.ServeMetrics(ctx, *metricsAddress); err != nil {
				logger.Error("the metrics endpoint stopped", "error", err)
			}
		}()
	}
	drv := provider.NewDefaultDriver(access.NewDefaultAccessFactory())
	err := bridge.Serve(ctx, drv, *endpoint, bridge.Options{
		ProviderName:  "Azure",
		DriverVersion: "machine-controller-manager-provider-azure " + providerVersion,
		// The Azure provider answers InitializeMachine with Unimplemented.
		InitializeMachineUnimplemented: true,
		Logger:                         logger,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "mcm-provider-azure:", err)
		os.Exit(1)
	}
}
