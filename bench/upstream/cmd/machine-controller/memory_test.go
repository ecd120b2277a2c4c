package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/tools/clientcmd"
)

const kubeconfig = `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}
users:
- name: u
  user: {token: secret}
contexts:
- name: x
  context: {cluster: c, user: u}
current-context: x
`

func parse(t *testing.T, args ...string) *memoryFlags {
	t.Helper()
	fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
	m := addMemoryFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestFlagsReachTheDriverConfig(t *testing.T) {
	m := parse(t, "--memory-kubelet-tick=200ms", "--memory-lease-interval=7s", "--memory-status-interval=5m")
	config, err := m.driverConfig("")
	if err != nil {
		t.Fatal(err)
	}
	if config.Tick != 200*time.Millisecond || config.LeaseInterval != 7*time.Second || config.StatusInterval != 5*time.Minute {
		t.Errorf("config = %+v", config)
	}
	if config.Target != nil {
		t.Error("no target kubeconfig: no Nodes should register")
	}
}

func TestNoneMeansNoTargetCluster(t *testing.T) {
	config, err := parse(t).driverConfig("none")
	if err != nil || config.Target != nil {
		t.Errorf("target kubeconfig none: config.Target = %v, err = %v", config.Target, err)
	}
}

func TestKubeletsTalkJSONUnderTheirOwnName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(path, []byte(kubeconfig), 0o600); err != nil {
		t.Fatal(err)
	}
	config, err := parse(t).driverConfig(path)
	if err != nil {
		t.Fatal(err)
	}
	if config.Target == nil {
		t.Fatal("a target kubeconfig should give the driver a client")
	}
	target, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	c := kubeletConfig(target, 300, 600)
	if c.ContentType != "application/json" || c.UserAgent != UserAgent || c.QPS != 300 || c.Burst != 600 {
		t.Errorf("kubelet config: content type %q, user agent %q, qps %v, burst %d", c.ContentType, c.UserAgent, c.QPS, c.Burst)
	}
	if c.Host != "https://127.0.0.1:6443" {
		t.Errorf("host = %q", c.Host)
	}
	if target.ContentType != "" || target.UserAgent != "" {
		t.Error("the target's own config must stay as read")
	}
}

func TestAMissingKubeconfigIsAnError(t *testing.T) {
	_, err := parse(t).driverConfig(filepath.Join(t.TempDir(), "missing"))
	if err == nil || !strings.Contains(err.Error(), "--target-kubeconfig") {
		t.Errorf("err = %v, want one naming --target-kubeconfig", err)
	}
}
