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
	fresh := flag.Bool("fresh", false, "a new connection for every call (prices a connection)")
	pace := flag.Duration("pace", 0, "start a pod at most this often per scheduling loop (kube-scheduler's "+
		"own work per pod, and the pace pods arrive at)")
	flag.Parse()

	rt, err := transport(*caFile, *certFile, *keyFile)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if *fresh {
		rt.(*http.Transport).DisableKeepAlives = true
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
		// Read as kube-scheduler's HTTPExtender.send reads it: decoded, then closed, whether or not the
		// decoder went on to see the end of the body (over HTTP/1.1 a body closed before its end costs
		// the connection).
		defer resp.Body.Close()
		requests.Add(1)
		proto.Store(resp.Proto)
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s: HTTP %d", verb, resp.StatusCode)
		}
		var answer any
		return json.NewDecoder(resp.Body).Decode(&answer)
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
			tick := time.Now()
			for next.Add(1) <= int64(*pods) && failed.Load() == nil {
				if wait := time.Until(tick.Add(*pace)); wait > 0 {
					time.Sleep(wait)
				}
				tick = time.Now()
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
