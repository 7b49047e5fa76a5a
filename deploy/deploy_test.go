// Package deploy holds kvasir's Kubernetes manifests; its test decodes every one strictly
// into the official Kubernetes API types and checks that they fit together.
package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kvasir-llm/kvasir"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"
)

// manifests are the decoded objects of every deploy/*.yaml file.
type manifests struct {
	services     map[string]*corev1.Service
	deployments  map[string]*appsv1.Deployment
	statefulSets map[string]*appsv1.StatefulSet
}

// decode reads one YAML document strictly: an unknown or duplicated field, or a kind this
// test does not know, is an error.
func (m *manifests) decode(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	var obj interface{ GetName() string }
	switch tm.APIVersion + " " + tm.Kind {
	case "v1 Service":
		obj = &corev1.Service{}
	case "apps/v1 Deployment":
		obj = &appsv1.Deployment{}
	case "apps/v1 StatefulSet":
		obj = &appsv1.StatefulSet{}
	default:
		return fmt.Errorf("unexpected kind %q of apiVersion %q", tm.Kind, tm.APIVersion)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return err
	}
	name := obj.GetName()
	if name == "" {
		return fmt.Errorf("%s without a name", tm.Kind)
	}
	var dup bool
	switch o := obj.(type) {
	case *corev1.Service:
		_, dup = m.services[name]
		m.services[name] = o
	case *appsv1.Deployment:
		_, dup = m.deployments[name]
		m.deployments[name] = o
	case *appsv1.StatefulSet:
		_, dup = m.statefulSets[name]
		m.statefulSets[name] = o
	}
	if dup {
		return fmt.Errorf("%s %s defined twice", tm.Kind, name)
	}
	return nil
}

// load decodes every manifest in the directory.
func load(t *testing.T) *manifests {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests (%v)", err)
	}
	m := &manifests{services: map[string]*corev1.Service{}, deployments: map[string]*appsv1.Deployment{}, statefulSets: map[string]*appsv1.StatefulSet{}}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range bytes.Split(b, []byte("\n---\n")) {
			if err := m.decode(doc); err != nil {
				t.Errorf("%s, document %d: %v", f, i+1, err)
			}
		}
	}
	return m
}

// workload is a Deployment's or StatefulSet's pod template and selector.
type workload struct {
	kind, name string
	selector   *metav1.LabelSelector
	pod        *corev1.PodTemplateSpec
	replicas   int32
}

func (m *manifests) workloads() []workload {
	var out []workload
	for n, d := range m.deployments {
		out = append(out, workload{"Deployment", n, d.Spec.Selector, &d.Spec.Template, ptrOr(d.Spec.Replicas, 1)})
	}
	for n, s := range m.statefulSets {
		out = append(out, workload{"StatefulSet", n, s.Spec.Selector, &s.Spec.Template, ptrOr(s.Spec.Replicas, 1)})
	}
	return out
}

func ptrOr(p *int32, def int32) int32 {
	if p == nil {
		return def
	}
	return *p
}

// TestManifests decodes the manifests and checks the set is there and that the
// pieces refer to each other correctly: selectors select their pod templates, Services
// select pods with the ports they target, StatefulSets name their headless Services, and
// the router's --backend URLs name instances that exist, on their Service's port.
func TestManifests(t *testing.T) {
	m := load(t)
	for _, want := range []string{"kvasir-router", "kvasir-redis"} {
		if m.deployments[want] == nil || m.services[want] == nil {
			t.Errorf("no Deployment and Service %s", want)
		}
	}
	for _, want := range []string{"kvasir-both", "kvasir-prefill", "kvasir-decode"} {
		if m.statefulSets[want] == nil {
			t.Errorf("no StatefulSet %s", want)
		}
	}
	ws := m.workloads()
	for _, w := range ws {
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		if err != nil || sel.Empty() {
			t.Errorf("%s %s: selector %v (%v)", w.kind, w.name, w.selector, err)
			continue
		}
		if !sel.Matches(labels.Set(w.pod.Labels)) {
			t.Errorf("%s %s: selector %v does not select its pods' labels %v", w.kind, w.name, sel, w.pod.Labels)
		}
		for _, c := range w.pod.Spec.Containers {
			if c.Image == "" || len(c.Args) == 0 {
				t.Errorf("%s %s: container %s has no image or args", w.kind, w.name, c.Name)
			}
		}
	}
	for n, s := range m.services {
		var target *workload
		for i := range ws {
			if len(s.Spec.Selector) > 0 && labels.SelectorFromSet(s.Spec.Selector).Matches(labels.Set(ws[i].pod.Labels)) {
				if target != nil {
					t.Errorf("Service %s selects both %s and %s", n, target.name, ws[i].name)
				}
				target = &ws[i]
			}
		}
		if target == nil {
			t.Errorf("Service %s selects no pods", n)
			continue
		}
		for _, p := range s.Spec.Ports {
			if containerPort(target.pod, p.TargetPort.String()) == 0 {
				t.Errorf("Service %s: targetPort %s is no container port of %s", n, p.TargetPort.String(), target.name)
			}
		}
	}
	for n, s := range m.statefulSets {
		svc := m.services[s.Spec.ServiceName]
		if svc == nil || svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("StatefulSet %s: serviceName %q is not a headless Service here", n, s.Spec.ServiceName)
		}
	}
	for _, name := range []string{"kvasir-router", "kvasir-router-disagg"} {
		if d := m.deployments[name]; d == nil {
			t.Errorf("no Deployment %s", name)
		} else {
			m.checkRouter(t, name, d.Spec.Template.Spec.Containers[0].Args)
		}
	}
	redis := m.deployments["kvasir-redis"]
	if redis != nil && !slices.Contains(redis.Spec.Template.Spec.Containers[0].Args, "allkeys-lru") {
		t.Error("Redis does not evict allkeys-lru: the KV pool leaves eviction to it")
	}
}

// checkRouter checks a router's arguments: its instances (--backend, or --prefill with
// --decode) name instances that exist, on their Service's port, of the role the flag says
// (--backend: role both; --prefill and --decode: that role, a decode instance with the
// KV transfer port it listens on among its container ports and its pod IP published).
func (m *manifests) checkRouter(t *testing.T, name string, args []string) {
	if len(args) == 0 || args[0] != "router" {
		t.Errorf("%s: the container runs %v, want kvasir router", name, args)
		return
	}
	count := map[string]int{}
	for i, a := range args {
		flag, ok := strings.CutPrefix(a, "--")
		if !ok || (flag != "backend" && flag != "prefill" && flag != "decode") || i+1 >= len(args) {
			continue
		}
		count[flag]++
		pod, err := m.checkBackend(args[i+1])
		if err != nil {
			t.Errorf("%s --%s %s: %v", name, flag, args[i+1], err)
			continue
		}
		role := "both"
		if flag != "backend" {
			role = flag
		}
		if err := checkRole(pod, role); err != nil {
			t.Errorf("%s --%s %s: %v", name, flag, args[i+1], err)
		}
	}
	switch {
	case count["backend"] > 0 && count["prefill"]+count["decode"] > 0:
		t.Errorf("%s: --backend with --prefill/--decode", name)
	case count["backend"] == 0 && (count["prefill"] == 0 || count["decode"] == 0):
		t.Errorf("%s: neither --backend nor --prefill with --decode", name)
	}
}

// checkRole checks that an instance's pod runs kvasir serve in role (no --role: both) and,
// for a decode instance, that its KV transfer listener binds every interface on a port
// the container declares, and publishes the pod's IP (from the downward API).
func checkRole(pod *corev1.PodTemplateSpec, role string) error {
	c := pod.Spec.Containers[0]
	flags := map[string]string{"role": "both", "kv-transfer-port": "8101"}
	for i, a := range c.Args {
		if f, ok := strings.CutPrefix(a, "--"); ok && i+1 < len(c.Args) {
			flags[f] = c.Args[i+1]
		}
	}
	if c.Args[0] != "serve" || flags["role"] != role {
		return fmt.Errorf("the pod runs %v, want kvasir serve --role %s", c.Args, role)
	}
	if role != "decode" {
		return nil
	}
	if containerPort(pod, flags["kv-transfer-port"]) == 0 {
		return fmt.Errorf("--kv-transfer-port %s is no container port", flags["kv-transfer-port"])
	}
	if flags["kv-transfer-host"] != "0.0.0.0" {
		return fmt.Errorf("--kv-transfer-host %q: prefill pods reach the listener on the pod IP, bind 0.0.0.0", flags["kv-transfer-host"])
	}
	if flags["kv-transfer-advertise"] != "$(POD_IP):"+flags["kv-transfer-port"] {
		return fmt.Errorf("--kv-transfer-advertise %q: want $(POD_IP):%s", flags["kv-transfer-advertise"], flags["kv-transfer-port"])
	}
	for _, e := range c.Env {
		if e.Name == "POD_IP" && e.ValueFrom != nil && e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "status.podIP" {
			return nil
		}
	}
	return errors.New("no POD_IP from status.podIP in the container's env")
}

// checkBackend checks that a backend URL names pod i of a StatefulSet through its headless
// Service (http://NAME-i.SERVICE:PORT), i below its replicas, on the Service's port, and
// returns that StatefulSet's pod template.
func (m *manifests) checkBackend(raw string) (*corev1.PodTemplateSpec, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, err
	}
	pod, svcName, ok := strings.Cut(u.Hostname(), ".")
	if !ok {
		return nil, fmt.Errorf("host %q is not POD.SERVICE", u.Hostname())
	}
	cut := strings.LastIndex(pod, "-")
	ordinal, err := strconv.Atoi(pod[cut+1:])
	if cut < 0 || err != nil {
		return nil, fmt.Errorf("pod %q has no ordinal", pod)
	}
	s := m.statefulSets[pod[:cut]]
	if s == nil || s.Spec.ServiceName != svcName {
		return nil, fmt.Errorf("no StatefulSet %s with Service %s", pod[:cut], svcName)
	}
	if int32(ordinal) >= ptrOr(s.Spec.Replicas, 1) {
		return nil, fmt.Errorf("pod %d of a StatefulSet of %d replicas", ordinal, ptrOr(s.Spec.Replicas, 1))
	}
	svc := m.services[svcName]
	for _, p := range svc.Spec.Ports {
		if strconv.Itoa(int(p.Port)) == u.Port() {
			return &s.Spec.Template, nil
		}
	}
	return nil, fmt.Errorf("port %s is not a port of Service %s", u.Port(), svcName)
}

// containerPort returns the number of the named (or numbered) port of the pod's
// containers, 0 when there is none.
func containerPort(pod *corev1.PodTemplateSpec, port string) int32 {
	for _, c := range pod.Spec.Containers {
		for _, p := range c.Ports {
			if p.Name == port || strconv.Itoa(int(p.ContainerPort)) == port {
				return p.ContainerPort
			}
		}
	}
	return 0
}

// TestStrictDecoding checks that the decoding refuses what a typo makes: an unknown field,
// and a field of the wrong type.
func TestStrictDecoding(t *testing.T) {
	m := &manifests{services: map[string]*corev1.Service{}, deployments: map[string]*appsv1.Deployment{}, statefulSets: map[string]*appsv1.StatefulSet{}}
	for _, doc := range []string{
		"apiVersion: v1\nkind: Service\nmetadata:\n  name: a\nspec:\n  selectr:\n    app: x\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: b\nspec:\n  replicas: two\n",
		"apiVersion: v1\nkind: Pod\nmetadata:\n  name: c\n",
	} {
		if err := m.decode([]byte(doc)); err == nil {
			t.Errorf("accepted:\n%s", doc)
		}
	}
}

// TestKVPoolWiring: every kvasir serve with --kv-pool names a Redis Service of these
// manifests on its port, whose Deployment evicts allkeys-lru within a maxmemory below its
// memory limit.
func TestKVPoolWiring(t *testing.T) {
	m := load(t)
	var specs []corev1.PodSpec
	for _, d := range m.deployments {
		specs = append(specs, d.Spec.Template.Spec)
	}
	for _, s := range m.statefulSets {
		specs = append(specs, s.Spec.Template.Spec)
	}
	pools := 0
	for _, spec := range specs {
		for _, c := range spec.Containers {
			i := slices.Index(c.Args, "--kv-pool")
			if len(c.Args) == 0 || c.Args[0] != "serve" || i < 0 {
				continue
			}
			pools++
			if i+1 >= len(c.Args) {
				t.Fatalf("%s: --kv-pool without a value", c.Name)
			}
			u, err := url.Parse(c.Args[i+1])
			if err != nil || u.Scheme != "redis" {
				t.Fatalf("%s: --kv-pool %q is not a redis:// URL (%v)", c.Name, c.Args[i+1], err)
			}
			svc := m.services[u.Hostname()]
			if svc == nil {
				t.Fatalf("--kv-pool %s: no Service %q here", u, u.Hostname())
			}
			port, _ := strconv.Atoi(u.Port())
			if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return int(p.Port) == port }) {
				t.Errorf("--kv-pool %s: Service %s has no port %d", u, svc.Name, port)
			}
			sel := labels.SelectorFromSet(svc.Spec.Selector)
			found := false
			for _, d := range m.deployments {
				if !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
					continue
				}
				found = true
				rc := d.Spec.Template.Spec.Containers[0]
				args := strings.Join(rc.Args, " ")
				if !strings.Contains(args, "--maxmemory-policy allkeys-lru") {
					t.Errorf("Redis %s: args %q lack --maxmemory-policy allkeys-lru", d.Name, args)
				}
				j := slices.Index(rc.Args, "--maxmemory")
				if j < 0 || j+1 >= len(rc.Args) {
					t.Fatalf("Redis %s: no --maxmemory", d.Name)
				}
				max, err := redisBytes(rc.Args[j+1])
				limit := rc.Resources.Limits[corev1.ResourceMemory]
				if err != nil || limit.IsZero() || max.Cmp(limit) >= 0 {
					t.Errorf("Redis %s: --maxmemory %s (%v) not below its memory limit %s", d.Name, rc.Args[j+1], err, limit.String())
				}
			}
			if !found {
				t.Errorf("--kv-pool %s: Service %s selects no Deployment", u, svc.Name)
			}
		}
	}
	if pools == 0 {
		t.Error("no kvasir serve uses the KV pool")
	}
}

// redisBytes reads a Redis memory size (4gb = 4 GiB, 100mb, 512kb, or bytes) as a
// Kubernetes quantity.
func redisBytes(v string) (resource.Quantity, error) {
	v = strings.ToLower(v)
	for unit, suffix := range map[string]string{"gb": "Gi", "mb": "Mi", "kb": "Ki"} {
		if n, ok := strings.CutSuffix(v, unit); ok {
			return resource.ParseQuantity(n + suffix)
		}
	}
	return resource.ParseQuantity(v)
}

// TestKVPoolOnEveryRole: the kvasir serve instances of every role (both, prefill, decode)
// share the KV pool (--kv-pool, whose wiring TestKVPoolWiring checks) with a host-memory
// tier (--kv-offload-memory) that fits well inside the container's memory limit (at most
// half of it, the model and the KV cache taking the rest).
func TestKVPoolOnEveryRole(t *testing.T) {
	m := load(t)
	roles := map[string]bool{}
	for _, w := range m.workloads() {
		for _, c := range w.pod.Spec.Containers {
			if len(c.Args) == 0 || c.Args[0] != "serve" {
				continue
			}
			role := "both"
			if i := slices.Index(c.Args, "--role"); i >= 0 && i+1 < len(c.Args) {
				role = c.Args[i+1]
			}
			roles[role] = true
			if !slices.Contains(c.Args, "--kv-pool") {
				t.Errorf("%s %s (role %s): no --kv-pool", w.kind, w.name, role)
			}
			i := slices.Index(c.Args, "--kv-offload-memory")
			if i < 0 || i+1 >= len(c.Args) {
				t.Errorf("%s %s (role %s): no --kv-offload-memory", w.kind, w.name, role)
				continue
			}
			n, err := kvasir.ParseBytes(c.Args[i+1]) // as kvasir serve reads it
			limit := c.Resources.Limits[corev1.ResourceMemory]
			if err != nil || n <= 0 || limit.IsZero() || 2*n > limit.Value() {
				t.Errorf("%s %s: --kv-offload-memory %s (%v) is more than half its memory limit %s", w.kind, w.name, c.Args[i+1], err, limit.String())
			}
		}
	}
	for _, r := range []string{"both", "prefill", "decode"} {
		if !roles[r] {
			t.Errorf("no kvasir serve of role %s in the manifests", r)
		}
	}
}
