// Package scaleout_test runs the scale-out recipes against local
// directories with a freshly built kvaudit on PATH: k8s-job.yaml's
// container scripts, extracted from the YAML; slurm.sh with a stand-in
// sbatch, and on a real single-node Slurm the test starts itself
// (TestSlurmCluster; skipped where Slurm is not installed, except in CI).
package scaleout_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/kvaudit/kvaudit/internal/testfiles"
)

// job is the part of a batch/v1 Job the test reads.
type job struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		CompletionMode string `yaml:"completionMode"`
		Completions    *int   `yaml:"completions"`
		Parallelism    *int   `yaml:"parallelism"`
		BackoffLimit   *int   `yaml:"backoffLimit"`
		Template       struct {
			Spec struct {
				RestartPolicy  string      `yaml:"restartPolicy"`
				InitContainers []container `yaml:"initContainers"`
				Containers     []container `yaml:"containers"`
				Volumes        []struct {
					Name string `yaml:"name"`
					PVC  struct {
						ClaimName string `yaml:"claimName"`
					} `yaml:"persistentVolumeClaim"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type container struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
	Env     []struct {
		Name  string `yaml:"name"`
		Value string `yaml:"value"`
	} `yaml:"env"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

func (c container) env(name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

func loadJobs(t *testing.T) map[string]job {
	t.Helper()
	b, err := os.ReadFile("k8s-job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	jobs := map[string]job{}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	for {
		var j job
		if err := dec.Decode(&j); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("k8s-job.yaml: %v", err)
		}
		if j.APIVersion != "batch/v1" || j.Kind != "Job" || j.Metadata.Name == "" {
			t.Fatalf("k8s-job.yaml: a document that is not a named batch/v1 Job: %+v", j)
		}
		jobs[j.Metadata.Name] = j
	}
	return jobs
}

// scriptPath returns the absolute path of a script of this directory,
// read first so that go test's cache knows the test depends on it (bash
// opens it, not the test).
func scriptPath(t *testing.T, name string) string {
	t.Helper()
	if _, err := os.ReadFile(name); err != nil {
		t.Fatal(err)
	}
	p, err := filepath.Abs(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// kvaudit builds kvaudit into a directory and returns it (for PATH).
func kvaudit(t *testing.T) string {
	t.Helper()
	return filepath.Dir(testfiles.BuildKvaudit(t))
}

// sh runs a kvaudit command line in dir and fails the test when it fails.
func sh(t *testing.T, dir, path string, args ...string) {
	t.Helper()
	cmd := exec.Command(filepath.Join(path, "kvaudit"), args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kvaudit %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

type result struct {
	code           int
	stdout, stderr string
}

// runScript runs a container's script the way its command says (e.g.
// /bin/sh -c SCRIPT) with the container's env, overridden by extra.
func runScript(t *testing.T, c container, path string, extra map[string]string) result {
	t.Helper()
	if len(c.Command) != 2 || c.Command[1] != "-c" || len(c.Args) != 1 {
		t.Fatalf("container %s: want command [SHELL, -c] and one script in args, got %q %d", c.Name, c.Command, len(c.Args))
	}
	cmd := exec.Command(c.Command[0], "-c", c.Args[0])
	env := []string{"PATH=" + path + string(os.PathListSeparator) + os.Getenv("PATH"), "NO_COLOR=1", "HOME=" + os.Getenv("HOME")}
	for _, e := range c.Env {
		if _, ok := extra[e.Name]; !ok {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return result{code, out.String(), errb.String()}
}

// TestK8sJobs: two Indexed checksum Jobs (producer and consumer, one pod
// per rank, the same image), then a compare Job whose init container holds
// it until every rank of both sides has checksummed; the compare prints the
// table and exits with the verdict: 0 on a clean transfer, 1 after a
// flipped bit, with the table still printed.
func TestK8sJobs(t *testing.T) {
	if _, err := exec.LookPath("sh"); err != nil {
		t.Skip("no sh")
	}
	jobs := loadJobs(t)
	producer, consumer, compare := jobs["kvaudit-checksum-producer"], jobs["kvaudit-checksum-consumer"], jobs["kvaudit-compare"]
	if len(jobs) != 3 || producer.Metadata.Name == "" || consumer.Metadata.Name == "" || compare.Metadata.Name == "" {
		t.Fatalf("want the Jobs kvaudit-checksum-producer, kvaudit-checksum-consumer and kvaudit-compare, got %d", len(jobs))
	}

	// The shape: Indexed Jobs with one pod per rank, one image and no
	// compiler anywhere, the volume mounted where $KV says.
	var images []string
	ranks := map[string]int{}
	for _, j := range []job{producer, consumer, compare} {
		spec := j.Spec.Template.Spec
		if spec.RestartPolicy != "Never" {
			t.Errorf("%s: restartPolicy %q, want Never", j.Metadata.Name, spec.RestartPolicy)
		}
		for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			images = append(images, c.Image)
			script := strings.Join(c.Args, "\n")
			for _, bad := range []string{"go install", "go build", "set -e"} {
				if strings.Contains(script, bad) {
					t.Errorf("%s/%s: the script runs %q", j.Metadata.Name, c.Name, bad)
				}
			}
			if len(c.VolumeMounts) != 1 || c.VolumeMounts[0].MountPath != c.env("KV") || c.env("RUN") != "1" {
				t.Errorf("%s/%s: mounts %+v, KV=%q, RUN=%q", j.Metadata.Name, c.Name, c.VolumeMounts, c.env("KV"), c.env("RUN"))
			}
		}
	}
	for _, j := range []job{producer, consumer} {
		c := j.Spec.Template.Spec.Containers
		if j.Spec.CompletionMode != "Indexed" || j.Spec.Completions == nil || j.Spec.Parallelism == nil || *j.Spec.Parallelism != *j.Spec.Completions || len(c) != 1 {
			t.Fatalf("%s: want an Indexed Job, one pod per rank at once, one container", j.Metadata.Name)
		}
		ranks[c[0].env("SIDE")] = *j.Spec.Completions
	}
	if producer.Spec.Template.Spec.Containers[0].Args[0] != consumer.Spec.Template.Spec.Containers[0].Args[0] {
		t.Error("the producer's and the consumer's checksum scripts differ")
	}
	slices.Sort(images)
	if len(slices.Compact(images)) != 1 {
		t.Errorf("images %q: want one", images)
	}
	if compare.Spec.BackoffLimit == nil || *compare.Spec.BackoffLimit != 0 || len(compare.Spec.Template.Spec.InitContainers) != 1 || len(compare.Spec.Template.Spec.Containers) != 1 {
		t.Fatal("kvaudit-compare: want backoffLimit 0, one init container and one container")
	}
	wait, cmp := compare.Spec.Template.Spec.InitContainers[0], compare.Spec.Template.Spec.Containers[0]
	if wait.env("PRODUCER_RANKS") != strconv.Itoa(ranks["producer"]) || wait.env("CONSUMER_RANKS") != strconv.Itoa(ranks["consumer"]) {
		t.Fatalf("the wait counts %s and %s ranks, the Jobs have %v", wait.env("PRODUCER_RANKS"), wait.env("CONSUMER_RANKS"), ranks)
	}
	tpSize := func(j job) int {
		n, _ := strconv.Atoi(j.Spec.Template.Spec.Containers[0].env("TP_SIZE"))
		return n
	}
	ptp, ctp := tpSize(producer), tpSize(consumer)
	if ptp < 1 || ctp < 1 || ranks["producer"]%ptp != 0 || ranks["consumer"]%ctp != 0 {
		t.Fatalf("TP_SIZE %d and %d do not divide the rank counts %v", ptp, ctp, ranks)
	}

	// Run it: dumps of that shape, one script per pod.
	path := kvaudit(t)
	kv := t.TempDir()
	synth := func(role string, tp, pp int) {
		sh(t, kv, path, "synth", "--out", ".", "--preset", "tiny", "--role", role, "--tp", strconv.Itoa(tp), "--pp", strconv.Itoa(pp), "--seed", "5")
	}
	synth("producer", ptp, ranks["producer"]/ptp)
	synth("consumer", ctp, ranks["consumer"]/ctp)
	env := func(run string, more ...string) map[string]string {
		m := map[string]string{"KV": kv, "RUN": run, "POLL_SECONDS": "0", "WAIT_SECONDS": "0"}
		for i := 0; i+1 < len(more); i += 2 {
			m[more[i]] = more[i+1]
		}
		return m
	}
	checksumSide := func(j job, run string) {
		c := j.Spec.Template.Spec.Containers[0]
		for rank := range *j.Spec.Completions {
			if r := runScript(t, c, path, env(run, "JOB_COMPLETION_INDEX", strconv.Itoa(rank))); r.code != 0 {
				t.Fatalf("%s pod %d: exit %d\n%s%s", j.Metadata.Name, rank, r.code, r.stdout, r.stderr)
			}
		}
	}

	// Before any record, and with only the producer's, the compare does
	// not start: the wait gives up (WAIT_SECONDS=0) naming the missing rank.
	if r := runScript(t, wait, path, env("1")); r.code != 3 || !strings.Contains(r.stderr, "no record of producer rank 0") {
		t.Fatalf("wait with no records: exit %d, %q", r.code, r.stderr)
	}
	checksumSide(producer, "1")
	if r := runScript(t, wait, path, env("1")); r.code != 3 || !strings.Contains(r.stderr, "no record of consumer rank 0") {
		t.Fatalf("wait with the producer's records only: exit %d, %q", r.code, r.stderr)
	}
	checksumSide(consumer, "1")
	if r := runScript(t, wait, path, env("1")); r.code != 0 {
		t.Fatalf("wait with every record: exit %d, %q", r.code, r.stderr)
	}
	r := runScript(t, cmp, path, env("1"))
	if r.code != 0 || !strings.Contains(r.stdout, "verified") || strings.Contains(r.stdout, "mismatch\t") {
		t.Fatalf("compare of a clean transfer: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A consumer with a flipped bit, in a new run: exit 1, and the
	// readable verdict is printed all the same.
	sh(t, kv, path, "inject", "consumer", "--fault", "bit-flip", "--seed", "9", "--out", "flipped")
	if err := os.Rename(filepath.Join(kv, "consumer"), filepath.Join(kv, "consumer-clean")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(kv, "flipped"), filepath.Join(kv, "consumer")); err != nil {
		t.Fatal(err)
	}
	checksumSide(producer, "2")
	checksumSide(consumer, "2")
	if r := runScript(t, wait, path, env("2")); r.code != 0 {
		t.Fatalf("wait, run 2: exit %d, %q", r.code, r.stderr)
	}
	r = runScript(t, cmp, path, env("2"))
	if r.code != 1 || !strings.Contains(r.stdout, "mismatch") || !strings.Contains(r.stdout, "X") || !strings.Contains(r.stderr, "mismatch: request") {
		t.Fatalf("compare after a flipped bit: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}

	// A rank whose dump is missing fails its pod with kvaudit's exit
	// status and leaves no marker, so the compare never starts.
	if err := os.Remove(filepath.Join(kv, "consumer", "rank-0-0.safetensors")); err != nil {
		t.Fatal(err)
	}
	c := consumer.Spec.Template.Spec.Containers[0]
	if r := runScript(t, c, path, env("3", "JOB_COMPLETION_INDEX", "0")); r.code != 3 {
		t.Fatalf("checksum of a missing dump: exit %d, %q", r.code, r.stderr)
	}
	if _, err := os.Stat(filepath.Join(kv, "records", "3", "consumer.done", "rank-0")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a failed pod left its marker: %v", err)
	}
}

// sbatch is a stand-in for Slurm's: it runs each job at once, in
// submission order (an array task by task, with SLURM_ARRAY_TASK_ID), with
// --export's variables, honours --dependency=afterok:ID[:ID...] by not
// running a job whose dependencies did not all succeed, and records every
// job in $SBATCH_STATE: jobs (id, name, dependency), ID.status (the exit
// status; for a job whose dependency failed, "CANCELLED" with
// --kill-on-invalid-dep=yes, as Slurm cancels it, else
// "DependencyNeverSatisfied", as it stays queued) and slurm-ID.out.
const sbatch = `#!/usr/bin/env bash
set -u
state=$SBATCH_STATE
id=$(( $(cat "$state/next" 2>/dev/null || echo 100) + 1 ))
echo "$id" > "$state/next"
parsable=0 array= dep= wrap= exports= name= kill=no
for a in "$@"; do
  case $a in
    --parsable) parsable=1 ;;
    --array=*) array=${a#--array=} ;;
    --dependency=*) dep=${a#--dependency=} ;;
    --export=*) exports=${a#--export=} ;;
    --wrap=*) wrap=${a#--wrap=} ;;
    --job-name=*) name=${a#--job-name=} ;;
    --kill-on-invalid-dep=*) kill=${a#--kill-on-invalid-dep=} ;;
    *) echo "sbatch stand-in: unexpected argument $a" >&2; exit 2 ;;
  esac
done
echo "$id $name ${dep:--}" >> "$state/jobs"
[ "$parsable" = 1 ] && echo "$id" || echo "Submitted batch job $id"
if [ -n "$dep" ]; then
  [ "${dep%%:*}" = afterok ] || { echo "sbatch stand-in: dependency $dep" >&2; exit 2; }
  IFS=: read -r -a deps <<< "${dep#afterok:}"
  for d in "${deps[@]}"; do
    if [ "$(cat "$state/$d.status")" != 0 ]; then
      if [ "$kill" = yes ]; then echo CANCELLED; else echo DependencyNeverSatisfied; fi > "$state/$id.status"
      exit 0
    fi
  done
fi
vars=()
IFS=, read -r -a parts <<< "$exports"
for p in "${parts[@]}"; do [ "$p" = ALL ] || vars+=("$p"); done
tasks=(-)
if [ -n "$array" ]; then tasks=($(seq "${array%-*}" "${array#*-}")); fi
status=0
for task in "${tasks[@]}"; do
  tenv=()
  [ "$task" = - ] || tenv=(SLURM_ARRAY_TASK_ID="$task")
  env "${vars[@]}" "${tenv[@]}" sh -c "$wrap" >> "$state/slurm-$id.out" 2>&1
  rc=$?
  [ "$status" = 0 ] && status=$rc
done
echo "$status" > "$state/$id.status"
`

// TestSlurm runs slurm.sh with the stand-in sbatch: two arrays (one task
// per rank of each side), then a compare that depends on both (afterok)
// and exits with the verdict, printing the table whatever it is; a failed
// task keeps the compare from running, and gets it cancelled rather than
// left queued. TestSlurmCluster runs the same on a real Slurm.
func TestSlurm(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	path := kvaudit(t)
	if err := os.WriteFile(filepath.Join(path, "sbatch"), []byte(sbatch), 0o755); err != nil {
		t.Fatal(err)
	}
	script := scriptPath(t, "slurm.sh")
	kv := t.TempDir()
	sh(t, kv, path, "synth", "--out", ".", "--preset", "tiny", "--role", "producer", "--tp", "2", "--pp", "2", "--seed", "4")
	sh(t, kv, path, "synth", "--out", ".", "--preset", "tiny", "--role", "consumer", "--tp", "4", "--layout", "hnd", "--seed", "4")

	type job struct{ id, name, dep, status, out string }
	submit := func() map[string]job {
		t.Helper()
		state := t.TempDir()
		cmd := exec.Command("bash", script, kv, "2", "2", "4", "1")
		cmd.Env = append(os.Environ(), "PATH="+path+string(os.PathListSeparator)+os.Getenv("PATH"), "SBATCH_STATE="+state, "NO_COLOR=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "compare") {
			t.Fatalf("slurm.sh: %v\n%s", err, out)
		}
		lines, err := os.ReadFile(filepath.Join(state, "jobs"))
		if err != nil {
			t.Fatal(err)
		}
		jobs := map[string]job{}
		for _, l := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
			f := strings.Fields(l)
			j := job{id: f[0], name: f[1], dep: f[2]}
			st, _ := os.ReadFile(filepath.Join(state, j.id+".status"))
			o, _ := os.ReadFile(filepath.Join(state, "slurm-"+j.id+".out"))
			j.status, j.out = strings.TrimSpace(string(st)), string(o)
			jobs[j.name] = j
		}
		p, c, cmp := jobs["kvaudit-producer"], jobs["kvaudit-consumer"], jobs["kvaudit-compare"]
		if len(jobs) != 3 || cmp.dep != "afterok:"+p.id+":"+c.id || p.dep != "-" || c.dep != "-" {
			t.Fatalf("jobs %+v: want two arrays and a compare after both", jobs)
		}
		return jobs
	}

	jobs := submit()
	if p, c := jobs["kvaudit-producer"], jobs["kvaudit-consumer"]; p.status != "0" || c.status != "0" {
		t.Fatalf("checksum arrays: %+v %+v", p, c)
	}
	for side, n := range map[string]int{"producer": 4, "consumer": 4} {
		recs, _ := filepath.Glob(filepath.Join(kv, "records", side, "*.record.json"))
		if len(recs) != n {
			t.Errorf("%s: %d records, want %d", side, len(recs), n)
		}
	}
	if cmp := jobs["kvaudit-compare"]; cmp.status != "0" || !strings.Contains(cmp.out, "verified") {
		t.Fatalf("compare of a clean transfer: %+v", cmp)
	}

	sh(t, kv, path, "inject", "consumer", "--fault", "bit-flip", "--seed", "2", "--out", "flipped")
	if err := os.RemoveAll(filepath.Join(kv, "consumer")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(kv, "flipped"), filepath.Join(kv, "consumer")); err != nil {
		t.Fatal(err)
	}
	if cmp := submit()["kvaudit-compare"]; cmp.status != "1" || !strings.Contains(cmp.out, "mismatch") || !strings.Contains(cmp.out, "X") {
		t.Fatalf("compare after a flipped bit: %+v", cmp)
	}

	if err := os.Remove(filepath.Join(kv, "consumer", "rank-0-2.safetensors")); err != nil {
		t.Fatal(err)
	}
	jobs = submit()
	if c, cmp := jobs["kvaudit-consumer"], jobs["kvaudit-compare"]; c.status != "3" || cmp.status != "CANCELLED" || cmp.out != "" {
		t.Fatalf("a missing dump: consumer %+v, compare %+v", c, cmp)
	}
}
