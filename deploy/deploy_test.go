// Package deploy holds kvasir's Kubernetes manifests; its test decodes every one strictly
// into the official Kubernetes API types and checks that they fit together.
package deploy

import (
	"bytes"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

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
	router := m.deployments["kvasir-router"]
	if router == nil {
		return
	}
	args := router.Spec.Template.Spec.Containers[0].Args
	if len(args) == 0 || args[0] != "router" {
		t.Fatalf("the router's container runs %v, want kvasir router", args)
	}
	backends := 0
	for i, a := range args {
		if a != "--backend" || i+1 >= len(args) {
			continue
		}
		backends++
		if err := m.checkBackend(args[i+1]); err != nil {
			t.Errorf("router --backend %s: %v", args[i+1], err)
		}
	}
	if backends == 0 {
		t.Error("the router has no --backend")
	}
	redis := m.deployments["kvasir-redis"]
	if redis != nil && !slices.Contains(redis.Spec.Template.Spec.Containers[0].Args, "allkeys-lru") {
		t.Error("Redis does not evict allkeys-lru: the KV pool leaves eviction to it")
	}
}

// checkBackend checks that a backend URL names pod i of a StatefulSet through its headless
// Service (http://NAME-i.SERVICE:PORT), i below its replicas, on the Service's port.
func (m *manifests) checkBackend(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	pod, svcName, ok := strings.Cut(u.Hostname(), ".")
	if !ok {
		return fmt.Errorf("host %q is not POD.SERVICE", u.Hostname())
	}
	cut := strings.LastIndex(pod, "-")
	ordinal, err := strconv.Atoi(pod[cut+1:])
	if cut < 0 || err != nil {
		return fmt.Errorf("pod %q has no ordinal", pod)
	}
	s := m.statefulSets[pod[:cut]]
	if s == nil || s.Spec.ServiceName != svcName {
		return fmt.Errorf("no StatefulSet %s with Service %s", pod[:cut], svcName)
	}
	if int32(ordinal) >= ptrOr(s.Spec.Replicas, 1) {
		return fmt.Errorf("pod %d of a StatefulSet of %d replicas", ordinal, ptrOr(s.Spec.Replicas, 1))
	}
	svc := m.services[svcName]
	for _, p := range svc.Spec.Ports {
		if strconv.Itoa(int(p.Port)) == u.Port() {
			return nil
		}
	}
	return fmt.Errorf("port %s is not a port of Service %s", u.Port(), svcName)
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
