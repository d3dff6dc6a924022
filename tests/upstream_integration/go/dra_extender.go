// DRA Extender as the DRA scheduler of upstream's test/integration/dra suite.
//
// tests/upstream_integration/harness.py copies this file next to its build-time copy of upstream's
// test package (package dra) and patches dra.go so that every kube-scheduler the tests start goes
// through startDRAExtender first: it starts `dra-extender serve` against the test's API server and
// rewrites the scheduler's configuration the way deploy/ configures kube-scheduler (DynamicResources
// disabled through multiPoint, our extender added). The harness describes what to start in a JSON
// file named by DRA_UPSTREAM_SETTINGS.

package dra

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	clientcmd "k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/scheduler/apis/config"
	"k8s.io/kubernetes/test/utils/client-go/ktesting"
	"sigs.k8s.io/yaml"
)

const draExtenderSettingsEnv = "DRA_UPSTREAM_SETTINGS"

// draExtenderSettings is what the harness writes (field names are its JSON keys).
type draExtenderSettings struct {
	// The dra-extender executable and the folder for kubeconfigs and logs.
	Binary  string `json:"binary"`
	WorkDir string `json:"workDir"`
	// The serving certificate of the extender port; Extender's tlsConfig trusts its CA.
	CertFile string `json:"certFile"`
	KeyFile  string `json:"keyFile"`
	// Profile plugins and the extender entry of deploy/'s kube-scheduler configuration; urlPrefix is
	// set here, once the port is known.
	Plugins  map[string]any `json:"plugins"`
	Extender map[string]any `json:"extender"`
	// The feature gates dra-extender knows: each gets the value the test's configuration gives it.
	FeatureGates []string `json:"featureGates"`
	// DynamicResources plugin arg -> the serve flag taking the same value in seconds.
	ArgFlags   map[string]string `json:"argFlags"`
	ExtraFlags []string          `json:"extraFlags"`
	// Created before the server starts when missing (where deploy/ keeps objects of ours).
	Namespaces []string `json:"namespaces"`
}

type draExtenderProcess struct {
	cmd     *exec.Cmd
	logPath string
	done    chan struct{}
	waitErr error
	stopped atomic.Bool
}

var draExtenderStarts atomic.Int32

// startDRAExtender starts dra-extender for a scheduler about to start with schedulerConfig and returns
// it with the configuration the scheduler must use instead. Without DRA in the test's configuration
// there is nothing to schedule for us: the scheduler then starts unchanged.
func startDRAExtender(tCtx ktesting.TContext, schedulerConfig string) (*draExtenderProcess, string) {
	tCtx.Helper()
	if !utilfeature.DefaultFeatureGate.Enabled(features.DynamicResourceAllocation) {
		tCtx.Log("dra-extender: not started, DynamicResourceAllocation is disabled")
		return nil, schedulerConfig
	}
	settings := loadDRAExtenderSettings(tCtx)
	for _, name := range settings.Namespaces {
		_, err := tCtx.Client().CoreV1().Namespaces().Create(tCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			tCtx.ExpectNoError(err, "create namespace %s for dra-extender", name)
		}
	}

	flags := []string{"--feature-gates=" + draExtenderFeatureGates(settings.FeatureGates)}
	flags = append(flags, draExtenderArgFlags(tCtx, schedulerConfig, settings.ArgFlags)...)
	extenderPort, debugPort := draExtenderFreePort(tCtx), draExtenderFreePort(tCtx)
	number := draExtenderStarts.Add(1)
	base := filepath.Join(settings.WorkDir, fmt.Sprintf("extender-%02d-%s", number, draExtenderFileName(tCtx.Name())))
	kubeconfig := base + ".kubeconfig"
	draExtenderWriteKubeconfig(tCtx, kubeconfig)

	args := append([]string{
		"serve",
		"--kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--extender-port=%d", extenderPort),
		fmt.Sprintf("--debug-port=%d", debugPort),
		"--extender-tls-cert-file=" + settings.CertFile,
		"--extender-tls-private-key-file=" + settings.KeyFile,
		"--log-level=info",
	}, flags...)
	args = append(args, settings.ExtraFlags...)
	process := &draExtenderProcess{logPath: base + ".log", done: make(chan struct{})}
	logFile, err := os.Create(process.logPath)
	tCtx.ExpectNoError(err, "create the dra-extender log")
	defer func() { _ = logFile.Close() }() // the child has its own descriptor
	fmt.Fprintf(logFile, "# %s %s\n", settings.Binary, strings.Join(args, " "))
	process.cmd = exec.Command(settings.Binary, args...)
	process.cmd.Stdout, process.cmd.Stderr = logFile, logFile
	// Gone with the test binary, also when a test timeout makes it panic.
	process.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	tCtx.ExpectNoError(process.cmd.Start(), "start dra-extender")
	go func() {
		process.waitErr = process.cmd.Wait()
		close(process.done)
	}()
	process.waitReady(tCtx, debugPort)
	tCtx.Logf("dra-extender started for test %s: %s, log %s", tCtx.Name(), strings.Join(flags, " "), process.logPath)
	return process, draExtenderSchedulerConfig(tCtx, schedulerConfig, settings, extenderPort)
}

func loadDRAExtenderSettings(tCtx ktesting.TContext) *draExtenderSettings {
	path := os.Getenv(draExtenderSettingsEnv)
	if path == "" {
		tCtx.Fatalf("%s is not set: run these tests through tests/upstream_integration/harness.py", draExtenderSettingsEnv)
	}
	data, err := os.ReadFile(path)
	tCtx.ExpectNoError(err, "read the harness settings")
	settings := &draExtenderSettings{}
	tCtx.ExpectNoError(json.Unmarshal(data, settings), "parse the harness settings %s", path)
	return settings
}

// draExtenderFeatureGates gives dra-extender the test's value of every gate it knows (a cluster's
// extender runs with the gates of its control plane). Emulated versions are taken into account.
func draExtenderFeatureGates(names []string) string {
	known := utilfeature.DefaultMutableFeatureGate.GetAll()
	var gates []string
	for _, name := range names {
		if _, ok := known[featuregate.Feature(name)]; ok {
			gates = append(gates, fmt.Sprintf("%s=%t", name, utilfeature.DefaultFeatureGate.Enabled(featuregate.Feature(name))))
		}
	}
	return strings.Join(gates, ",")
}

// draExtenderArgFlags turns DynamicResources plugin args that the test sets to something other than
// upstream's default into the dra-extender flags that take the same setting.
func draExtenderArgFlags(tCtx ktesting.TContext, schedulerConfig string, argFlags map[string]string) []string {
	cfg := newSchedulerComponentConfig(tCtx, schedulerConfig)
	var flags []string
	for _, profile := range cfg.Profiles {
		for _, pluginConfig := range profile.PluginConfig {
			args, ok := pluginConfig.Args.(*config.DynamicResourcesArgs)
			if !ok {
				continue
			}
			set := map[string]time.Duration{}
			if args.FilterTimeout != nil && args.FilterTimeout.Duration != config.DynamicResourcesFilterTimeoutDefault {
				set["filterTimeout"] = args.FilterTimeout.Duration
			}
			if args.BindingTimeout != nil && args.BindingTimeout.Duration != config.DynamicResourcesBindingTimeoutDefault {
				set["bindingTimeout"] = args.BindingTimeout.Duration
			}
			for arg, value := range set {
				flag := argFlags[arg]
				if flag == "" || value <= 0 {
					tCtx.Logf("dra-extender: DynamicResources arg %s=%s has no dra-extender flag, not passed", arg, value)
					continue
				}
				flags = append(flags, fmt.Sprintf("%s=%g", flag, value.Seconds()))
			}
		}
	}
	return flags
}

// draExtenderSchedulerConfig adds deploy/'s plugin settings to every profile (a default-scheduler
// profile when there is none) and our extender to the extenders.
func draExtenderSchedulerConfig(tCtx ktesting.TContext, schedulerConfig string, settings *draExtenderSettings, port int) string {
	doc := map[string]any{}
	tCtx.ExpectNoError(yaml.Unmarshal([]byte(schedulerConfig), &doc), "parse the test's scheduler configuration")
	if doc == nil {
		doc = map[string]any{}
	}
	profiles, _ := doc["profiles"].([]any)
	if len(profiles) == 0 {
		profiles = []any{map[string]any{"schedulerName": "default-scheduler"}}
	}
	for _, item := range profiles {
		profile := item.(map[string]any)
		plugins, _ := profile["plugins"].(map[string]any)
		if plugins == nil {
			plugins = map[string]any{}
		}
		for point, wanted := range settings.Plugins {
			set, _ := plugins[point].(map[string]any)
			if set == nil {
				set = map[string]any{}
			}
			for _, list := range []string{"enabled", "disabled"} {
				add, _ := wanted.(map[string]any)[list].([]any)
				have, _ := set[list].([]any)
				if len(add) > 0 {
					set[list] = append(have, add...)
				}
			}
			plugins[point] = set
		}
		profile["plugins"] = plugins
	}
	doc["profiles"] = profiles
	extender := map[string]any{}
	for key, value := range settings.Extender {
		extender[key] = value
	}
	extender["urlPrefix"] = fmt.Sprintf("https://127.0.0.1:%d/scheduler", port)
	extenders, _ := doc["extenders"].([]any)
	doc["extenders"] = append(extenders, extender)
	data, err := yaml.Marshal(doc)
	tCtx.ExpectNoError(err, "write the scheduler configuration")
	return string(data)
}

func draExtenderWriteKubeconfig(tCtx ktesting.TContext, path string) {
	rest := tCtx.RESTConfig()
	kubeconfig := clientcmdapi.NewConfig()
	kubeconfig.Clusters["test"] = &clientcmdapi.Cluster{
		Server:                   rest.Host,
		CertificateAuthority:     rest.CAFile,
		CertificateAuthorityData: rest.CAData,
		TLSServerName:            rest.ServerName,
		InsecureSkipTLSVerify:    rest.Insecure,
	}
	kubeconfig.AuthInfos["test"] = &clientcmdapi.AuthInfo{
		Token:                 rest.BearerToken,
		ClientCertificate:     rest.CertFile,
		ClientCertificateData: rest.CertData,
		ClientKey:             rest.KeyFile,
		ClientKeyData:         rest.KeyData,
	}
	kubeconfig.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "test"}
	kubeconfig.CurrentContext = "test"
	tCtx.ExpectNoError(clientcmd.WriteToFile(*kubeconfig, path), "write the dra-extender kubeconfig")
}

func draExtenderFreePort(tCtx ktesting.TContext) int {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	tCtx.ExpectNoError(err, "find a free port")
	defer func() { _ = listener.Close() }()
	return listener.Addr().(*net.TCPAddr).Port
}

var draExtenderUnsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func draExtenderFileName(testName string) string {
	return draExtenderUnsafeName.ReplaceAllString(testName, "_")
}

func (process *draExtenderProcess) waitReady(tCtx ktesting.TContext, debugPort int) {
	client := &http.Client{Timeout: 2 * time.Second}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", debugPort)
	deadline := time.Now().Add(2 * time.Minute)
	for {
		select {
		case <-process.done:
			tCtx.Fatalf("dra-extender exited before it was ready (%v), see %s:\n%s", process.waitErr, process.logPath, process.logTail())
		default:
		}
		if response, err := client.Get(url); err == nil {
			_ = response.Body.Close()
			if response.StatusCode == http.StatusOK {
				return
			}
		}
		if time.Now().After(deadline) {
			process.stop(tCtx)
			tCtx.Fatalf("dra-extender not ready after 2 minutes, see %s:\n%s", process.logPath, process.logTail())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// stop ends the process (nil: none was started). Exiting before it was asked to is an error of the
// test that started the scheduler: every scheduling decision after that failed.
func (process *draExtenderProcess) stop(tCtx ktesting.TContext) {
	if process == nil || !process.stopped.CompareAndSwap(false, true) {
		return
	}
	select {
	case <-process.done:
		tCtx.Errorf("dra-extender exited while the scheduler ran (%v), see %s:\n%s", process.waitErr, process.logPath, process.logTail())
		return
	default:
	}
	_ = process.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-process.done:
	case <-time.After(15 * time.Second):
		_ = process.cmd.Process.Kill()
		<-process.done
		tCtx.Logf("dra-extender did not stop within 15s of SIGTERM and was killed, see %s", process.logPath)
	}
}

func (process *draExtenderProcess) logTail() string {
	data, err := os.ReadFile(process.logPath)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 40 {
		lines = lines[len(lines)-40:]
	}
	return strings.Join(lines, "\n")
}
