package main

import (
	"fmt"
	"time"

	"github.com/gardener/machine-controller-manager/pkg/apis/constants"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mcm-rs/machine-controller-manager/provider-go/memdriver"
)

// UserAgent of the simulated kubelets' requests, apart from the controller's own.
const UserAgent = "mcm-provider-memory"

// memoryFlags configure the in-memory driver's simulated kubelets (upstream's flags configure
// the controller).
type memoryFlags struct {
	tick           time.Duration
	leaseInterval  time.Duration
	statusInterval time.Duration
	qps            float32
	burst          int
}

func addMemoryFlags(fs *pflag.FlagSet) *memoryFlags {
	m := &memoryFlags{}
	fs.DurationVar(&m.tick, "memory-kubelet-tick", time.Second, "how often the in-memory driver's kubelets run: a new VM's Node registers within one tick")
	fs.DurationVar(&m.leaseInterval, "memory-lease-interval", 10*time.Second, "how often each Node's Lease is renewed")
	fs.DurationVar(&m.statusInterval, "memory-status-interval", 30*time.Second, "how often each Node's Ready status is posted again")
	fs.Float32Var(&m.qps, "memory-kube-api-qps", 50, "queries per second of the kubelets to the target cluster")
	fs.IntVar(&m.burst, "memory-kube-api-burst", 100, "burst of the kubelets' queries to the target cluster")
	return m
}

// driverConfig is the in-memory driver's configuration. With a target kubeconfig its Nodes
// register there through a client of their own (JSON, as a kubelet stand-in needs nothing
// else, and the project's sandbox decodes protobuf for a few kinds only); without one, or with
// upstream's "none", no Node registers.
func (m *memoryFlags) driverConfig(targetKubeconfig string) (memdriver.Config, error) {
	config := memdriver.Config{Tick: m.tick, LeaseInterval: m.leaseInterval, StatusInterval: m.statusInterval}
	if targetKubeconfig == "" || targetKubeconfig == constants.TargetKubeconfigDisabledValue {
		return config, nil
	}
	restConfig, err := clientcmd.BuildConfigFromFlags("", targetKubeconfig)
	if err != nil {
		return config, fmt.Errorf("read --target-kubeconfig %s: %w", targetKubeconfig, err)
	}
	kubelets := kubeletConfig(restConfig, m.qps, m.burst)
	client, err := kubernetes.NewForConfig(kubelets)
	if err != nil {
		return config, fmt.Errorf("build the kubelets' client: %w", err)
	}
	config.Target = client
	return config, nil
}

// kubeletConfig is a copy of the target's rest config for the simulated kubelets.
func kubeletConfig(target *rest.Config, qps float32, burst int) *rest.Config {
	c := rest.CopyConfig(target)
	c.QPS, c.Burst = qps, burst
	c.UserAgent = UserAgent
	c.ContentType = "application/json"
	return c
}
