//go:build linux

package scaleout_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kvaudit/kvaudit/internal/testlong"
)

// slurmTools are the programs a single-node Slurm needs: Debian's munge
// and slurm-wlm packages.
var slurmTools = []string{"mungekey", "munged", "slurmctld", "slurmd", "sbatch", "scontrol", "scancel"}

// requireSlurm reports whether the Slurm test must run: in CI (CI=true,
// as GitHub Actions sets it) or with KVAUDIT_REQUIRE_SLURM=1 (.ci/run).
func requireSlurm() bool {
	return os.Getenv("CI") == "true" || os.Getenv("KVAUDIT_REQUIRE_SLURM") == "1"
}

// lookTool finds a program on PATH or in the sbin directories, where
// Debian puts the daemons and root's PATH may not.
func lookTool(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/local/sbin", "/sbin"} {
		p := filepath.Join(dir, name)
		if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q is not on PATH nor in /usr/sbin", name)
}

// daemon is a process the test started and must stop.
type daemon struct {
	name   string
	cmd    *exec.Cmd
	log    string
	exited chan struct{}
}

// stop sends SIGTERM and waits for the daemon to exit, killing it after
// 15 seconds.
func (d *daemon) stop(t *testing.T) {
	select {
	case <-d.exited:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exited:
	case <-time.After(15 * time.Second):
		t.Logf("%s did not stop on SIGTERM in 15s: killed", d.name)
		_ = d.cmd.Process.Kill()
		<-d.exited
	}
}

// slurmCluster is a single-node Slurm started by the test: its own munged
// (own key and socket), slurmctld and slurmd on free ports, every file in
// one temporary directory; nothing of the machine's own Slurm or munge
// configuration is read or touched.
type slurmCluster struct {
	dir     string
	conf    string
	node    string
	tools   map[string]string
	daemons []*daemon
}

// clientEnv is the environment of Slurm's client commands (and so of the
// jobs, which slurm.sh submits with --export=ALL): this cluster's
// configuration and PATH with extra first, and none of the SLURM_* and
// SBATCH_* variables of a Slurm the test may itself run under
// (SBATCH_PARTITION would name a partition this cluster has not).
func (c *slurmCluster) clientEnv(extra string) []string {
	path := os.Getenv("PATH")
	if extra != "" {
		path = extra + string(os.PathListSeparator) + path
	}
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "SLURM_") && !strings.HasPrefix(kv, "SBATCH_") && !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return append(env, "SLURM_CONF="+c.conf, "PATH="+path, "NO_COLOR=1")
}

// client runs one of Slurm's client commands and returns its output.
func (c *slurmCluster) client(name string, args ...string) (string, error) {
	cmd := exec.Command(c.tools[name], args...)
	cmd.Env = c.clientEnv("")
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("%s %s: %v: %s", name, strings.Join(args, " "), err, strings.TrimSpace(errb.String()))
	}
	return out.String(), nil
}

// start starts a daemon in the foreground, its output in dir/NAME.out.
func (c *slurmCluster) start(t *testing.T, name string, args ...string) *daemon {
	t.Helper()
	log := filepath.Join(c.dir, name+".out")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(c.tools[name], args...)
	cmd.Env = c.clientEnv("")
	cmd.Stdout, cmd.Stderr = f, f
	// Killed with the test process where its cleanups cannot run (a
	// timeout's panic); a ^C reaches them too, in the same process group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", name, err)
	}
	d := &daemon{name: name, cmd: cmd, log: log, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.exited) }()
	c.daemons = append(c.daemons, d)
	return d
}

// waitFor polls cond until it holds, failing the test after timeout or
// when a daemon exits (startSlurm's cleanup then logs the daemons'
// output).
func (c *slurmCluster) waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		for _, d := range c.daemons {
			select {
			case <-d.exited:
				t.Fatalf("waiting for %s: %s exited (%v)", what, d.name, d.cmd.ProcessState)
			default:
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: not after %v", what, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// logs returns the end of each daemon's log, for a failure message.
func (c *slurmCluster) logs() string {
	var b strings.Builder
	for _, name := range []string{"munged.out", "munged.log", "slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out", "jobcomp.txt"} {
		data, err := os.ReadFile(filepath.Join(c.dir, name))
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSpace(string(data)), "\n")
		lines = lines[max(0, len(lines)-15):]
		fmt.Fprintf(&b, "--- %s (last %d lines)\n%s\n", name, len(lines), strings.Join(lines, "\n"))
	}
	return b.String()
}

// freePort returns a TCP port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// needSlurm returns the paths of slurmTools, or skips the test where
// Slurm or munge is not installed or the test is not root, unless
// requireSlurm, when it fails it.
func needSlurm(t *testing.T) map[string]string {
	t.Helper()
	tools := map[string]string{}
	var missing []string
	for _, name := range slurmTools {
		p, err := lookTool(name)
		if err != nil {
			missing = append(missing, name)
			continue
		}
		tools[name] = p
	}
	skip := ""
	switch {
	case len(missing) > 0:
		skip = fmt.Sprintf("Slurm is not installed (no %s; Debian: apt-get install slurm-wlm munge)", strings.Join(missing, ", "))
	case os.Geteuid() != 0:
		skip = "a Slurm of its own needs root (slurmd runs the jobs)"
	}
	if skip != "" {
		if requireSlurm() {
			t.Fatalf("%s, but CI=true or KVAUDIT_REQUIRE_SLURM=1 requires this test", skip)
		}
		t.Skip(skip)
	}
	return tools
}

// startSlurm starts a single-node cluster with the tools of needSlurm and
// waits for its node to be idle. Everything it started is stopped, its
// jobs cancelled and its directory removed when the test ends, whether it
// passed or not.
func startSlurm(t *testing.T, tools map[string]string) *slurmCluster {
	t.Helper()
	// A short directory of its own: munged's socket path must fit in
	// sun_path (108 bytes), which t.TempDir's may not.
	dir, err := os.MkdirTemp("", "kvslurm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// munged wants its socket's directory searchable by all.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	host, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	c := &slurmCluster{dir: dir, conf: filepath.Join(dir, "slurm.conf"), node: strings.Split(host, ".")[0], tools: tools}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("Slurm's logs:\n%s", c.logs())
		}
		for i := len(c.daemons) - 1; i >= 0; i-- {
			c.daemons[i].stop(t)
		}
	})

	key, socket := filepath.Join(dir, "munge.key"), filepath.Join(dir, "munge.socket")
	if out, err := exec.Command(tools["mungekey"], "--create", "--keyfile", key).CombinedOutput(); err != nil {
		t.Fatalf("mungekey: %v\n%s", err, out)
	}
	c.start(t, "munged", "--foreground", "--key-file", key, "--socket", socket,
		"--pid-file", filepath.Join(dir, "munged.pid"), "--log-file", filepath.Join(dir, "munged.log"),
		"--seed-file", filepath.Join(dir, "munged.seed"))
	c.waitFor(t, "munged's socket", 20*time.Second, func() bool { _, err := os.Stat(socket); return err == nil })

	for _, sub := range []string{"state", "spool"} {
		if err := os.Mkdir(filepath.Join(dir, sub), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	// No cgroups (a CI container may have none it can use), no accounting
	// database (exit codes are read with scontrol, jobs are kept an hour
	// after they end), and the scheduler run at once on every submission
	// and completion. 8 CPUs whatever the machine has (config_overrides):
	// every task of both arrays can start at once, as on a cluster.
	conf := fmt.Sprintf(`ClusterName=kvaudit-test
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%[4]s
CredType=cred/munge
StateSaveLocation=%[5]s/state
SlurmdSpoolDir=%[5]s/spool
SlurmctldPidFile=%[5]s/slurmctld.pid
SlurmdPidFile=%[5]s/slurmd.pid
SlurmctldLogFile=%[5]s/slurmctld.log
SlurmdLogFile=%[5]s/slurmd.log
MailProg=/bin/true
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=%[5]s/jobcomp.txt
MinJobAge=3600
SchedulerType=sched/builtin
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
NodeName=%[1]s NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN
PartitionName=kvaudit Nodes=ALL Default=YES MaxTime=INFINITE State=UP
`, c.node, freePort(t), freePort(t), socket, dir)
	if err := os.WriteFile(c.conf, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.conf"), []byte("CgroupPlugin=autodetect\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	c.start(t, "slurmctld", "-D", "-f", c.conf)
	c.start(t, "slurmd", "-D", "-f", c.conf, "-N", c.node)
	// Jobs end before the daemons stop (cleanups run last first).
	t.Cleanup(func() {
		if _, err := c.client("scancel", "--partition", "kvaudit"); err != nil {
			t.Logf("cancelling the test's jobs: %v", err)
			return
		}
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) {
			out, err := c.client("scontrol", "show", "node", c.node, "-o")
			if err != nil || strings.Contains(out, "State=IDLE ") {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	})
	c.waitFor(t, "node "+c.node+" to be idle", 60*time.Second, func() bool {
		out, err := c.client("scontrol", "show", "node", c.node, "-o")
		return err == nil && strings.Contains(out, " State=IDLE ")
	})
	return c
}

// slurmJob is one job (or array task) as scontrol shows it: its
// Key=Value fields.
type slurmJob map[string]string

func (j slurmJob) String() string {
	return fmt.Sprintf("job %s (%s, task %s): %s reason %s, exit %s, nodes %q", j["JobId"], j["JobName"], j["ArrayTaskId"], j["JobState"], j["Reason"], j["ExitCode"], j["NodeList"])
}

// jobs returns the jobs of an id: a job, or every task of an array (and
// the record of its tasks not yet started, ArrayTaskId=N-M).
func (c *slurmCluster) jobs(t *testing.T, id string) []slurmJob {
	t.Helper()
	out, err := c.client("scontrol", "show", "job", "-o", id)
	if err != nil {
		t.Fatal(err)
	}
	var jobs []slurmJob
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		j := slurmJob{}
		for _, f := range strings.Fields(line) {
			if k, v, ok := strings.Cut(f, "="); ok {
				j[k] = v
			}
		}
		jobs = append(jobs, j)
	}
	return jobs
}

// settled reports whether a job will not change again: ended, or held
// for ever by a dependency that failed.
func (j slurmJob) settled() bool {
	switch j["JobState"] {
	case "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE", "PREEMPTED":
		return true
	}
	return j["JobState"] == "PENDING" && j["Reason"] == "DependencyNeverSatisfied"
}

// slurmRound is what one run of slurm.sh submitted, once settled.
type slurmRound struct {
	producer, consumer []slurmJob // one per array task, by task id
	compare            slurmJob
}

var submitted = regexp.MustCompile(`^submitted: producer array (\d+), consumer array (\d+), compare (\d+) after both$`)

// runSlurmSh runs slurm.sh against kv from work (where the jobs' output
// goes) with kvaudit's directory on PATH, and waits for every job it
// submitted to settle.
func (c *slurmCluster) runSlurmSh(t *testing.T, work, kv, path string, sizes ...string) slurmRound {
	t.Helper()
	script := scriptPath(t, "slurm.sh")
	cmd := exec.Command("bash", append([]string{script, kv}, sizes...)...)
	cmd.Dir = work
	cmd.Env = c.clientEnv(path)
	out, err := cmd.CombinedOutput()
	m := submitted.FindStringSubmatch(strings.TrimSpace(string(out)))
	if err != nil || m == nil {
		t.Fatalf("slurm.sh: %v\n%s", err, out)
	}
	ids := m[1:]
	var all [][]slurmJob
	c.waitFor(t, "the jobs of slurm.sh ("+strings.Join(ids, ", ")+")", 90*time.Second, func() bool {
		all = all[:0]
		for _, id := range ids {
			jobs := c.jobs(t, id)
			for _, j := range jobs {
				if !j.settled() {
					return false
				}
			}
			all = append(all, jobs)
		}
		return true
	})
	r := slurmRound{producer: tasks(t, all[0]), consumer: tasks(t, all[1])}
	if len(all[2]) != 1 {
		t.Fatalf("compare %s: %d jobs", ids[2], len(all[2]))
	}
	r.compare = all[2][0]
	for name, jobs := range map[string][]slurmJob{"kvaudit-producer": r.producer, "kvaudit-consumer": r.consumer, "kvaudit-compare": {r.compare}} {
		for _, j := range jobs {
			if j["JobName"] != name {
				t.Fatalf("%v: want the name %s", j, name)
			}
		}
	}
	return r
}

// tasks orders an array's settled tasks by task id, failing the test
// where the ids are not 0..N-1.
func tasks(t *testing.T, jobs []slurmJob) []slurmJob {
	t.Helper()
	out := make([]slurmJob, len(jobs))
	for _, j := range jobs {
		i, err := strconv.Atoi(j["ArrayTaskId"])
		if err != nil || i < 0 || i >= len(jobs) || out[i] != nil {
			t.Fatalf("array task %q of %d tasks: %v", j["ArrayTaskId"], len(jobs), j)
		}
		out[i] = j
	}
	return out
}

// output reads a job's standard output (slurm-ID.out, or
// slurm-ARRAY_TASK.out); a job that never ran has none.
func output(t *testing.T, j slurmJob) (string, bool) {
	t.Helper()
	b, err := os.ReadFile(j["StdOut"])
	if errors.Is(err, os.ErrNotExist) {
		return "", false
	} else if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

// TestSlurmCluster runs slurm.sh on a real single-node Slurm it starts
// (munged, slurmctld and slurmd of Debian's munge and slurm-wlm): with
// the script's own arrays and dependency, a clean transfer's compare job
// completes with exit 0 and prints "verified"; after a flipped bit it
// FAILS with exit 1, the table still printed; with a consumer rank's dump
// missing, that task fails with kvaudit's exit 3 naming the file and the
// compare job never runs: Slurm cancels it, DependencyNeverSatisfied,
// without a node or an output file. Skipped without Slurm, except in CI.
func TestSlurmCluster(t *testing.T) {
	testlong.Skip(t, "starts a Slurm cluster")
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	tools := needSlurm(t)
	// Built and written before the cluster starts, so that their
	// directories outlive every job (cleanups run last first).
	path := kvaudit(t)
	kv, work := t.TempDir(), t.TempDir()
	c := startSlurm(t, tools)

	sh(t, kv, path, "synth", "--out", ".", "--preset", "tiny", "--role", "producer", "--tp", "2", "--pp", "2", "--seed", "4")
	sh(t, kv, path, "synth", "--out", ".", "--preset", "tiny", "--role", "consumer", "--tp", "4", "--layout", "hnd", "--seed", "4")
	checkTasks := func(side string, tasks []slurmJob, failed int) {
		t.Helper()
		if len(tasks) != 4 {
			t.Fatalf("%s: %d array tasks, want one per rank (4)", side, len(tasks))
		}
		for i, j := range tasks {
			state, code := "COMPLETED", "0:0"
			if i == failed {
				state, code = "FAILED", "3:0"
			}
			if j["JobState"] != state || j["ExitCode"] != code {
				out, _ := output(t, j)
				t.Errorf("%s task %d: %v, want %s exit %s\n%s", side, i, j, state, code, out)
			}
		}
	}

	r := c.runSlurmSh(t, work, kv, path, "2", "2", "4", "1")
	checkTasks("producer", r.producer, -1)
	checkTasks("consumer", r.consumer, -1)
	for side, n := range map[string]int{"producer": 4, "consumer": 4} {
		recs, _ := filepath.Glob(filepath.Join(kv, "records", side, "*.record.json"))
		if len(recs) != n {
			t.Errorf("%s: %d records, want %d", side, len(recs), n)
		}
	}
	out, _ := output(t, r.compare)
	if r.compare["JobState"] != "COMPLETED" || r.compare["ExitCode"] != "0:0" || !strings.Contains(out, "# kvaudit diff: verified") {
		t.Fatalf("compare of a clean transfer: %v\n%s", r.compare, out)
	}
	// afterok: the compare started after every task had ended (the times
	// are RFC 3339 to the second, so they compare as strings).
	for _, j := range append(r.producer, r.consumer...) {
		if j["EndTime"] > r.compare["StartTime"] {
			t.Errorf("the compare started at %s, before %v ended at %s", r.compare["StartTime"], j, j["EndTime"])
		}
	}

	sh(t, kv, path, "inject", "consumer", "--fault", "bit-flip", "--seed", "2", "--out", "flipped")
	if err := os.RemoveAll(filepath.Join(kv, "consumer")); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(kv, "flipped"), filepath.Join(kv, "consumer")); err != nil {
		t.Fatal(err)
	}
	r = c.runSlurmSh(t, work, kv, path, "2", "2", "4", "1")
	checkTasks("producer", r.producer, -1)
	checkTasks("consumer", r.consumer, -1)
	out, _ = output(t, r.compare)
	if r.compare["JobState"] != "FAILED" || r.compare["ExitCode"] != "1:0" || !strings.Contains(out, "# kvaudit diff: mismatch") || !strings.Contains(out, "X") {
		t.Fatalf("compare after a flipped bit: %v, want FAILED exit 1:0\n%s", r.compare, out)
	}

	// Consumer rank 0-2 is array task 2 (task = pp*tp_size + tp).
	if err := os.Remove(filepath.Join(kv, "consumer", "rank-0-2.safetensors")); err != nil {
		t.Fatal(err)
	}
	r = c.runSlurmSh(t, work, kv, path, "2", "2", "4", "1")
	checkTasks("producer", r.producer, -1)
	checkTasks("consumer", r.consumer, 2)
	if out, _ := output(t, r.consumer[2]); !strings.Contains(out, "rank-0-2.safetensors") {
		t.Errorf("the failed task's output does not name the missing dump:\n%s", out)
	}
	out, ran := output(t, r.compare)
	if r.compare["JobState"] != "CANCELLED" || r.compare["Reason"] != "DependencyNeverSatisfied" || ran || r.compare["BatchHost"] != "" || (r.compare["NodeList"] != "" && r.compare["NodeList"] != "(null)") {
		t.Fatalf("compare after a failed checksum task: %v, output file %v, want cancelled (DependencyNeverSatisfied), never run\n%s", r.compare, ran, out)
	}
}
