package main

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestOpsEndpoints(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "shoal_test_things_total", Help: "h"})
	reg.MustRegister(c)
	c.Inc()
	var notReady error
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := httptest.NewServer(opsMux(ctx, reg, func(context.Context) error { return notReady }))
	defer srv.Close()
	get := func(path string) (int, string) {
		t.Helper()
		r, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		b, _ := io.ReadAll(r.Body)
		return r.StatusCode, string(b)
	}
	for _, tc := range []struct {
		path string
		code int
		body string
		set  func()
	}{
		{"/healthz", 200, "ok", nil},
		{"/readyz", 200, "ready", nil},
		{"/metrics", 200, "shoal_test_things_total 1", nil},
		{"/readyz", 503, "not ready: no leader", func() { notReady = errors.New("no leader") }},
		{"/healthz", 200, "ok", nil},
		{"/readyz", 503, "shutting down", func() { notReady = nil; cancel() }},
	} {
		if tc.set != nil {
			tc.set()
		}
		code, body := get(tc.path)
		if code != tc.code || !strings.Contains(body, tc.body) {
			t.Errorf("GET %s: %d %q, want %d with %q", tc.path, code, body, tc.code, tc.body)
		}
	}
}
