package bridge

import (
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func TestServeMetricsServesHealthAndTheDefaultRegistry(t *testing.T) {
	counter := prometheus.NewCounter(prometheus.CounterOpts{Name: "bridge_test_calls_total", Help: "test"})
	prometheus.MustRegister(counter)
	defer prometheus.Unregister(counter)
	counter.Add(3)
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := listener.Addr().String()
	_ = listener.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeMetrics(ctx, address) }()
	get := func(path string) string {
		for range 50 {
			response, err := http.Get("http://" + address + path)
			if err == nil {
				body, _ := io.ReadAll(response.Body)
				_ = response.Body.Close()
				return string(body)
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("GET %s never answered", path)
		return ""
	}
	if body := get("/healthz"); body != "ok" {
		t.Fatalf("/healthz = %q", body)
	}
	if body := get("/metrics"); !strings.Contains(body, "bridge_test_calls_total 3") {
		t.Fatalf("/metrics lacks the counter:\n%s", body)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
