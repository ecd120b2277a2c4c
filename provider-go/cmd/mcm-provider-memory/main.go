// Command mcm-provider-memory serves the in-memory provider (package memdriver) through the
// bridge: upstream's driver.Driver behind the project's gRPC driver contract. Its VMs live in
// the process's memory; with --target-kubeconfig their Nodes register and heartbeat there.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mcm-rs/machine-controller-manager/provider-go/bridge"
	"github.com/mcm-rs/machine-controller-manager/provider-go/memdriver"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "mcm-provider-memory:", err)
		os.Exit(1)
	}
}

func run() error {
	endpoint := flag.String("endpoint", "unix:///tmp/mcm-provider-memory.sock", "where to serve the driver contract: unix:///path/to.sock or tcp://host:port")
	targetKubeconfig := flag.String("target-kubeconfig", "", "kubeconfig of the cluster the VMs' Nodes register in (none: no Nodes)")
	adminAddress := flag.String("admin-address", "", "host:port of a plain-HTTP /healthz and /admin/vms (the VMs as JSON), for tests; none when empty")
	leaseInterval := flag.Duration("lease-interval", 10*time.Second, "how often each Node's Lease is renewed")
	statusInterval := flag.Duration("status-interval", 30*time.Second, "how often each Node's Ready status is posted again")
	qps := flag.Float64("target-kube-api-qps", 50, "queries per second to the target cluster")
	burst := flag.Int("target-kube-api-burst", 100, "burst of queries to the target cluster")
	flag.Parse()

	logger := slog.New(slog.NewTextHandler(os.Stderr, nil))
	slog.SetDefault(logger)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	config := memdriver.Config{LeaseInterval: *leaseInterval, StatusInterval: *statusInterval, Logger: logger}
	if *targetKubeconfig != "" {
		rest, err := clientcmd.BuildConfigFromFlags("", *targetKubeconfig)
		if err != nil {
			return fmt.Errorf("read --target-kubeconfig %s: %w", *targetKubeconfig, err)
		}
		rest.QPS, rest.Burst = float32(*qps), *burst
		rest.UserAgent = "mcm-provider-memory"
		// JSON rather than client-go's protobuf: the embedded sandbox decodes protobuf for a few
		// kinds only, and a kubelet stand-in gains nothing from it.
		rest.ContentType = "application/json"
		client, err := kubernetes.NewForConfig(rest)
		if err != nil {
			return fmt.Errorf("build the target cluster's client: %w", err)
		}
		config.Target = client
	}
	drv := memdriver.New(config)
	go drv.Run(ctx)
	if *adminAddress != "" {
		go serveAdmin(ctx, *adminAddress, drv, logger)
	}
	logger.Info("serving the in-memory provider", "endpoint", *endpoint, "provider", memdriver.ProviderName)
	return bridge.Serve(ctx, drv, *endpoint, bridge.Options{
		ProviderName:  memdriver.ProviderName,
		DriverVersion: "memory",
		Logger:        logger,
	})
}

// vmView is one VM as /admin/vms shows it (the field names of provider-virtual's admin API,
// so the same test helpers read both).
type vmView struct {
	MachineName string    `json:"machineName"`
	ProviderID  string    `json:"providerId"`
	NodeName    string    `json:"nodeName"`
	Class       string    `json:"class"`
	CreatedAt   time.Time `json:"createdAt"`
}

func serveAdmin(ctx context.Context, address string, drv *memdriver.Driver, logger *slog.Logger) {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/admin/vms", func(w http.ResponseWriter, _ *http.Request) {
		vms := drv.VMs()
		views := make([]vmView, 0, len(vms))
		for _, vm := range vms {
			views = append(views, vmView{vm.MachineName, vm.ProviderID, vm.NodeName, vm.ClassName, vm.CreatedAt})
		}
		w.Header().Set("Content-Type", "application/json")
		if err := json.NewEncoder(w).Encode(views); err != nil {
			logger.Info("answering /admin/vms failed", "error", err)
		}
	})
	server := &http.Server{Addr: address, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		_ = server.Close()
	}()
	if err := server.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
		logger.Error("the health endpoint stopped", "address", address, "error", err)
	}
}
