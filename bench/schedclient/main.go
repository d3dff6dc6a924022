// A client that calls an extender the way kube-scheduler does: its transport is built as
// pkg/scheduler/extender.go's makeTransport builds it (client-go's TLS config, then apimachinery's
// SetTransportDefaults, which offers HTTP/2 by ALPN over TLS unless DISABLE_HTTP2 is set). It sends
// each pod's filter and prioritize in turn and its bind in a goroutine, and prints JSON: the
// requests made, the connections opened, and the protocol the server negotiated.
//
// bench/cpu_floor_bench.py builds it (in a temporary module pinned as tests/e2e/go.mod) and runs it.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"os"
	"sync"
	"sync/atomic"
	"time"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	restclient "k8s.io/client-go/rest"
)

func transport(caFile, certFile, keyFile string) (http.RoundTripper, error) {
	var cfg restclient.Config
	cfg.TLSClientConfig.CAFile = caFile
	cfg.TLSClientConfig.CertFile = certFile
	cfg.TLSClientConfig.KeyFile = keyFile
	tlsConfig, err := restclient.TLSConfigFor(&cfg)
	if err != nil {
		return nil, err
	}
	if tlsConfig != nil {
		return utilnet.SetTransportDefaults(&http.Transport{TLSClientConfig: tlsConfig}), nil
	}
	return utilnet.SetTransportDefaults(&http.Transport{}), nil
}

func main() {
	base := flag.String("url", "", "the extender's URL prefix")
	caFile := flag.String("ca", "", "CA file (https)")
	certFile := flag.String("cert", "", "client certificate (mutual TLS)")
	keyFile := flag.String("key", "", "client key (mutual TLS)")
	pods := flag.Int("pods", 1000, "pods to send")
	concurrency := flag.Int("concurrency", 1, "scheduling loops (kube-scheduler has one)")
	filterFile := flag.String("filter", "", "filter/prioritize body")
	bindFile := flag.String("bind", "", "bind body")
	flag.Parse()

	rt, err := transport(*caFile, *certFile, *keyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	client := &http.Client{Transport: rt, Timeout: 30 * time.Second}
	filterBody, err1 := os.ReadFile(*filterFile)
	bindBody, err2 := os.ReadFile(*bindFile)
	if err1 != nil || err2 != nil {
		fmt.Fprintln(os.Stderr, err1, err2)
		os.Exit(2)
	}
	var requests, newConns atomic.Int64
	var proto atomic.Value
	proto.Store("")
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		if !info.Reused {
			newConns.Add(1)
		}
	}}
	ctx := httptrace.WithClientTrace(context.Background(), trace)
	call := func(verb string, body []byte) error {
		req, err := http.NewRequestWithContext(ctx, "POST", *base+"/"+verb, bytes.NewReader(body))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/json")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			return err
		}
		requests.Add(1)
		proto.Store(resp.Proto)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d", verb, resp.StatusCode)
		}
		return nil
	}
	// As kube-scheduler: each scheduling loop runs a pod's filter and prioritize in turn, then hands
	// its bind to a goroutine of its own (the binding cycle) and goes on with the next pod.
	var next atomic.Int64
	var wg, binds sync.WaitGroup
	var failed atomic.Value
	started := time.Now()
	for w := 0; w < *concurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(*pods) && failed.Load() == nil {
				if err := call("filter", filterBody); err != nil {
					failed.Store(err.Error())
					return
				}
				if err := call("prioritize", filterBody); err != nil {
					failed.Store(err.Error())
					return
				}
				binds.Add(1)
				go func() {
					defer binds.Done()
					if err := call("bind", bindBody); err != nil {
						failed.Store(err.Error())
					}
				}()
			}
		}()
	}
	wg.Wait()
	binds.Wait()
	out := map[string]any{"requests": requests.Load(), "new_connections": newConns.Load(),
		"proto": proto.Load(), "seconds": time.Since(started).Seconds()}
	if f := failed.Load(); f != nil {
		out["error"] = f
	}
	json.NewEncoder(os.Stdout).Encode(out)
	if failed.Load() != nil {
		os.Exit(1)
	}
}
