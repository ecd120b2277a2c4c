// Command machine-controller is upstream's machine controller (the provider half of the Go
// machine-controller-manager) with the in-memory driver of provider-go/memdriver, built the way
// every Gardener provider's cmd/machine-controller is: upstream's app.Run with a driver. The
// driver's Nodes register and heartbeat in the target cluster, so machines reach Running as with
// provider-virtual (docs/performance.md#against-upstream).
package main

import (
	"context"
	"fmt"
	"os"

	_ "github.com/gardener/machine-controller-manager/pkg/util/client/metrics/prometheus" // client metrics
	"github.com/gardener/machine-controller-manager/pkg/util/provider/app"
	"github.com/gardener/machine-controller-manager/pkg/util/provider/app/options"
	_ "github.com/gardener/machine-controller-manager/pkg/util/reflector/prometheus" // reflector metrics
	_ "github.com/gardener/machine-controller-manager/pkg/util/workqueue/prometheus" // workqueue metrics
	"github.com/spf13/pflag"
	"k8s.io/component-base/cli/flag"
	"k8s.io/component-base/logs"

	"github.com/mcm-rs/machine-controller-manager/provider-go/memdriver"
)

func main() {
	s := options.NewMCServer()
	s.AddFlags(pflag.CommandLine)
	memory := addMemoryFlags(pflag.CommandLine)
	flag.InitFlags()
	logs.InitLogs()
	defer logs.FlushLogs()

	config, err := memory.driverConfig(s.TargetKubeconfig)
	if err != nil {
		fmt.Fprintf(os.Stderr, "machine-controller: %v\n", err)
		os.Exit(1)
	}
	drv := memdriver.New(config)
	go drv.Run(context.Background())
	if err := app.Run(s, drv); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
		os.Exit(1)
	}
}
