// Command peer-plugin is the Go peer of hack/bench/peer: a DRA kubelet plugin that does per claim
// what kubernetes-sigs/dra-example-driver's kubelet plugin does, written for this benchmark (see
// ../README.md for why it is not that driver itself).
//
// Per NodePrepareResources: the official kubeletplugin helper GETs each claim from the API server
// and hands it over; under one lock the plugin reads its checkpoint file (every prepared claim,
// JSON), answers from it when the claim is already prepared, else writes one CDI spec for the
// claim with the CDI library (one device per allocated device of this driver, an env edit each),
// adds the claim to the checkpoint and writes the checkpoint back (temp file, fsync, rename).
// NodeUnprepareResources: read the checkpoint, remove the claim's CDI spec, write the checkpoint.
//
// Nothing is slowed down on purpose, and where the example driver leaves room the peer takes
// the cheaper path: the CDI cache does not watch its folder, specs are JSON (cheaper than the
// library's default YAML), the client has no QPS limit unless -qps says otherwise.
//
// Once the DRA socket is served it writes its pid to -started-file.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	cdiparser "tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const cdiClass = "claim"

func main() {
	driverName := flag.String("driver", "", "DRA driver name; results of other drivers are left alone")
	nodeName := flag.String("node-name", "", "this node's name")
	kubeconfig := flag.String("kubeconfig", "", "credentials for the claim GETs")
	kubeletRoot := flag.String("kubelet-root-dir", "/var/lib/kubelet", "sockets go to plugins_registry/ and plugins/<driver>/ below it")
	cdiRoot := flag.String("cdi-root", "/var/run/cdi", "where CDI specs are written")
	stateDir := flag.String("state-dir", "", "checkpoint folder (default: the plugin folder)")
	qps := flag.Float64("qps", -1, "client QPS limit; negative: none")
	burst := flag.Int("burst", 0, "client burst when -qps is positive")
	startedFile := flag.String("started-file", "", "written with the pid once the sockets serve")
	klog.InitFlags(nil)
	flag.Parse()
	if *driverName == "" || *kubeconfig == "" {
		fail("-driver and -kubeconfig are required")
	}

	config, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		fail("kubeconfig: %v", err)
	}
	config.QPS, config.Burst = float32(*qps), *burst
	client, err := kubernetes.NewForConfig(config)
	if err != nil {
		fail("client: %v", err)
	}

	pluginDir := filepath.Join(*kubeletRoot, "plugins", *driverName)
	if *stateDir == "" {
		*stateDir = pluginDir
	}
	for _, dir := range []string{pluginDir, *stateDir, *cdiRoot, filepath.Join(*kubeletRoot, "plugins_registry")} {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			fail("%v", err)
		}
	}
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(*cdiRoot), cdiapi.WithAutoRefresh(false))
	if err != nil {
		fail("CDI cache: %v", err)
	}
	p := &peer{
		driver:     *driverName,
		vendor:     "k8s." + *driverName,
		cdi:        cache,
		checkpoint: filepath.Join(*stateDir, "checkpoint.json"),
	}
	if _, err := os.Stat(p.checkpoint); errors.Is(err, os.ErrNotExist) {
		if err := p.save(map[string][]preparedDevice{}); err != nil {
			fail("checkpoint: %v", err)
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	helper, err := kubeletplugin.Start(ctx, p,
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(*nodeName),
		kubeletplugin.DriverName(*driverName),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(*kubeletRoot, "plugins_registry")),
		kubeletplugin.PluginDataDirectoryPath(pluginDir),
	)
	if err != nil {
		fail("start: %v", err)
	}
	if *startedFile != "" {
		if err := os.WriteFile(*startedFile, []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			fail("%v", err)
		}
	}
	<-ctx.Done()
	helper.Stop()
}

// preparedDevice is what the checkpoint keeps of one prepared device: enough to answer a repeated
// prepare and to write the CDI spec again.
type preparedDevice struct {
	Request string   `json:"request"`
	Pool    string   `json:"pool"`
	Device  string   `json:"device"`
	CDIIDs  []string `json:"cdiDeviceIDs"`
	Env     []string `json:"env"`
}

type checkpointFile struct {
	PreparedClaims map[string][]preparedDevice `json:"preparedClaims"`
}

type peer struct {
	mu         sync.Mutex // one prepare or unprepare at a time, as the example driver's state lock
	driver     string
	vendor     string
	cdi        *cdiapi.Cache
	checkpoint string
}

func (p *peer) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, claim := range claims {
		devices, err := p.prepare(claim)
		if err != nil {
			out[claim.UID] = kubeletplugin.PrepareResult{Err: fmt.Errorf("claim %s/%s: %w", claim.Namespace, claim.Name, err)}
			continue
		}
		result := kubeletplugin.PrepareResult{}
		for _, d := range devices {
			result.Devices = append(result.Devices, kubeletplugin.Device{
				Requests: []string{d.Request}, PoolName: d.Pool, DeviceName: d.Device, CDIDeviceIDs: d.CDIIDs,
			})
		}
		out[claim.UID] = result
	}
	return out, nil
}

func (p *peer) prepare(claim *resourceapi.ResourceClaim) ([]preparedDevice, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	prepared, err := p.load()
	if err != nil {
		return nil, err
	}
	uid := string(claim.UID)
	if devices, ok := prepared[uid]; ok {
		return devices, nil
	}
	if claim.Status.Allocation == nil {
		return nil, errors.New("not allocated")
	}
	var devices []preparedDevice
	spec := &cdispec.Spec{Kind: p.vendor + "/" + cdiClass}
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != p.driver {
			continue
		}
		name := uid + "-" + r.Device
		env := []string{"BENCH_DEVICE=" + r.Device}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: cdispec.ContainerEdits{Env: env}})
		devices = append(devices, preparedDevice{
			Request: r.Request, Pool: r.Pool, Device: r.Device,
			CDIIDs: []string{cdiparser.QualifiedName(p.vendor, cdiClass, name)}, Env: env,
		})
	}
	if len(devices) == 0 {
		return nil, fmt.Errorf("no device of driver %s in the allocation", p.driver)
	}
	if spec.Version, err = cdiapi.MinimumRequiredVersion(spec); err != nil {
		return nil, err
	}
	if err := p.cdi.WriteSpec(spec, p.specName(uid)); err != nil {
		return nil, fmt.Errorf("CDI spec: %w", err)
	}
	prepared[uid] = devices
	if err := p.save(prepared); err != nil {
		return nil, err
	}
	return devices, nil
}

func (p *peer) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, claim := range claims {
		out[claim.UID] = p.unprepare(string(claim.UID))
	}
	return out, nil
}

func (p *peer) unprepare(uid string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	prepared, err := p.load()
	if err != nil {
		return err
	}
	if _, ok := prepared[uid]; !ok {
		return nil
	}
	if err := p.cdi.RemoveSpec(p.specName(uid)); err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	delete(prepared, uid)
	return p.save(prepared)
}

func (p *peer) specName(uid string) string {
	return cdiapi.GenerateTransientSpecName(p.vendor, cdiClass, uid) + ".json"
}

func (p *peer) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
}

func (p *peer) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	return kubeletplugin.ErrHealthNotSupported
}

func (p *peer) load() (map[string][]preparedDevice, error) {
	data, err := os.ReadFile(p.checkpoint)
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	var c checkpointFile
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("checkpoint %s: %w", p.checkpoint, err)
	}
	if c.PreparedClaims == nil {
		c.PreparedClaims = map[string][]preparedDevice{}
	}
	return c.PreparedClaims, nil
}

// save replaces the checkpoint: temp file, fsync, rename (one durable write per call).
func (p *peer) save(prepared map[string][]preparedDevice) (err error) {
	data, err := json.Marshal(checkpointFile{PreparedClaims: prepared})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(p.checkpoint), ".checkpoint-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			_ = os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		_ = tmp.Close()
		return err
	}
	if err = tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), p.checkpoint)
}

func fail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "peer-plugin: "+format+"\n", args...)
	os.Exit(1)
}
