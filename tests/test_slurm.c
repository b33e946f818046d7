/* test_slurm — the Slurm launcher's pieces that need no cluster: the
 * job-array script and manifest bfd writes (every #SBATCH line, quoting,
 * mode 0600, and that sh runs task K as the exact argv of manifest line
 * K+1), the parsing of `scontrol show job -o` lines into phases and exit
 * codes, slurm_run's exit status, output cap and timeout, and sbatch output
 * parsing through a stand-in sbatch. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/slurm.h"

static char dir[256];

static void setup(void) {
    snprintf(dir, sizeof dir, "/tmp/bf_test_slurm_XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
}

TestSuite(slurm_unit, .init = setup, .fini = teardown);

static char *slurp(const char *path) {
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

static void fake(const char *name, const char *body) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    cr_assert_eq(chmod(p, 0700), 0);
}

/* Runs the array script as Slurm would run its task K (srun and the
 * bfworker stand-in print their argv one word per []), and returns the
 * trial's log, where the task's output goes. */
static const char *run_task(const char *script, int k, long long trial) {
    char cmd[1200], log[512];
    snprintf(log, sizeof log, "%s/logs/%lld.log", dir, trial);
    unlink(log);
    snprintf(cmd, sizeof cmd, "cd '%s' && SLURM_ARRAY_TASK_ID=%d SLURM_ARRAY_JOB_ID=900 sh '%s'",
             dir, k, script);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    return slurp(log);
}

Test(slurm_unit, array_script) {
    char script[512], manifest[512], err[512], logs[512], home[512];
    snprintf(script, sizeof script, "%s/array.sh", dir);
    snprintf(manifest, sizeof manifest, "%s/array.tasks", dir);
    snprintf(logs, sizeof logs, "%s/logs", dir);
    snprintf(home, sizeof home, "%s", dir);
    cr_assert_eq(mkdir(logs, 0700), 0);
    slurm_array a = {.job = 5,
                     .ranks = 4,
                     .nodes = 2,
                     .cpus_per_rank = 2,
                     .gpus_per_rank = 1,
                     .time_limit_s = 3601,
                     .threads = 3,
                     .partition = "gpu",
                     .srun = "srun",
                     .mpi = "pmix",
                     .mpi_cidr = "198.18.0.0/24",
                     .bfworker = "/opt/bf it's/bfworker",
                     .endpoint = "ipc:///h/worker.sock",
                     .home = home,
                     .cwd = "/work"};
    slurm_array_task t[2] = {{17, 2, "0123456789abcdef0123456789abcdef", NULL},
                             {18, 1, "fedcba9876543210fedcba9876543210", "avit"}};
    cr_assert_eq(slurm_write_array(script, manifest, &a, t, 2, err, sizeof err), 0, "%s", err);
    struct stat sb;
    cr_assert_eq(stat(script, &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0600);
    cr_assert_eq(stat(manifest, &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0600, "the manifest holds the tokens");
    cr_assert_str_eq(slurp(manifest), "17 2 0123456789abcdef0123456789abcdef -\n"
                                      "18 1 fedcba9876543210fedcba9876543210 avit\n");
    const char *s = slurp(script);
    const char *want[] = {"#!/bin/sh\n", "#SBATCH --job-name=bf-j5\n", "#SBATCH --array=0-1\n",
                          "#SBATCH --ntasks=4\n", "#SBATCH --nodes=2\n",
                          /* MPI's TCP on bfd's subnet, unless the user set it */
                          ": \"${OMPI_MCA_btl_tcp_if_include:=198.18.0.0/24}\" "
                          "\"${OMPI_MCA_oob_tcp_if_include:=198.18.0.0/24}\"\n"
                          "export OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include\n",
                          "#SBATCH --cpus-per-task=2\n", "#SBATCH --gpus-per-task=1\n",
                          /* 3601 s rounds up to 61 minutes */
                          "#SBATCH --time=1:01:00\n", "#SBATCH --partition=gpu\n",
                          "#SBATCH --chdir=/work\n", "#SBATCH --no-requeue\n",
                          "OMP_NUM_THREADS=3\n", "'srun' --kill-on-bad-exit=1 '--mpi=pmix'"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(s, want[i]), "missing %s in:\n%s", want[i], s);

    /* sh reads the quoted words back exactly: srun is a stand-in printing its argv */
    char srun[512];
    snprintf(srun, sizeof srun, "%s/srun it's", dir);
    FILE *f = fopen(srun, "w");
    cr_assert(f);
    fprintf(f, "#!/bin/sh\nfor a; do printf '[%%s]' \"$a\"; done\necho\n");
    fclose(f);
    cr_assert_eq(chmod(srun, 0700), 0);
    a.srun = srun;
    a.mpi = "";
    a.gpus_per_rank = 0;
    a.time_limit_s = 0;
    a.partition = NULL;
    a.nodes = 0;
    a.mpi_cidr = "";
    a.cwd = dir;
    cr_assert_eq(slurm_write_array(script, manifest, &a, t, 2, err, sizeof err), 0, "%s", err);
    s = slurp(script);
    cr_assert_null(strstr(s, "--nodes"), "nodes not given: no --nodes");
    cr_assert_null(strstr(s, "OMPI_MCA"), "no subnet: Open MPI chooses");
    cr_assert_null(strstr(s, "--gpus-per-task"), "no GPUs: no --gpus-per-task");
    cr_assert_null(strstr(s, "--time"), "no limit: no --time");
    cr_assert_null(strstr(s, "--partition"));
    cr_assert_null(strstr(s, "--mpi"));
    char want0[2048], want1[2048];
    snprintf(want0, sizeof want0,
             "[--kill-on-bad-exit=1][/opt/bf it's/bfworker][run][--trial][17][--connect]"
             "[ipc:///h/worker.sock][--token][0123456789abcdef0123456789abcdef]"
             "[--out][%s/trials/17][--attempt][2]\n",
             dir);
    snprintf(want1, sizeof want1,
             "[--kill-on-bad-exit=1][/opt/bf it's/bfworker][run][--trial][18][--connect]"
             "[ipc:///h/worker.sock][--token][fedcba9876543210fedcba9876543210]"
             "[--out][%s/trials/18][--attempt][1][--stage-root][%s/stages][--stage][avit]\n",
             dir, dir);
    const char *log = run_task(script, 0, 17);
    cr_assert(strstr(log, "== bfd: trial 17 attempt 2, 4 ranks, Slurm job 900_0 on "), "%s", log);
    cr_assert(strstr(log, want0), "task 0 ran\n%s\nnot\n%s", log, want0);
    log = run_task(script, 1, 18);
    cr_assert(strstr(log, want1), "task 1 ran\n%s\nnot\n%s", log, want1);
    /* a task past the manifest says so and exits 64 (not a silent no-op) */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "SLURM_ARRAY_TASK_ID=2 sh '%s' 2>/dev/null", script);
    int st = system(cmd);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 64, "status %d", st);

    /* more nodes than ranks, and a subnet that is not a CIDR, are refused */
    a.nodes = 5;
    cr_assert_eq(slurm_write_array(script, manifest, &a, t, 2, err, sizeof err), -1);
    cr_assert(strstr(err, "nodes 5"), "%s", err);
    a.nodes = 2;
    a.mpi_cidr = "eth0; rm -rf /";
    cr_assert_eq(slurm_write_array(script, manifest, &a, t, 2, err, sizeof err), -1);
    cr_assert(strstr(err, "not a CIDR"), "%s", err);
    a.mpi_cidr = NULL;
    /* values #SBATCH lines cannot carry are refused, naming the field */
    a.cwd = "/my work";
    cr_assert_eq(slurm_write_array(script, manifest, &a, t, 2, err, sizeof err), -1);
    cr_assert(strstr(err, "working directory '/my work' holds a space"), "%s", err);
    a.cwd = dir;
    /* a token or stage the manifest line cannot carry as one word */
    t[1].stage = "a vit";
    cr_assert_eq(slurm_write_array(script, manifest, &a, t, 2, err, sizeof err), -1);
    cr_assert(strstr(err, "stage 'a vit'"), "%s", err);
}

Test(slurm_unit, scontrol_lines) {
    slurm_status st;
    char err[256];
    cr_assert_eq(slurm_parse_job_line("JobId=12 JobName=bf-3 UserId=root(0) JobState=RUNNING "
                                      "Reason=None ExitCode=0:0 DerivedExitCode=9:0",
                                      &st, err, sizeof err),
                 0);
    cr_assert_eq(st.phase, SLURM_RUNNING);
    cr_assert_str_eq(st.state, "RUNNING");
    cr_assert_eq(st.exit_code, 0, "DerivedExitCode must not be read as ExitCode");
    cr_assert_eq(slurm_parse_job_line("JobId=12 JobState=FAILED Reason=NonZeroExitCode "
                                      "ExitCode=75:0",
                                      &st, err, sizeof err),
                 0);
    cr_assert_eq(st.phase, SLURM_ENDED);
    cr_assert_eq(st.exit_code, 75);
    cr_assert_eq(st.signal, 0);
    cr_assert_eq(
        slurm_parse_job_line("JobId=12 JobState=CANCELLED ExitCode=0:15", &st, err, sizeof err), 0);
    cr_assert_eq(st.phase, SLURM_ENDED);
    cr_assert_eq(st.signal, 15);
    cr_assert_eq(slurm_parse_job_line("JobId=12 JobState=PENDING Reason=Resources ExitCode=0:0",
                                      &st, err, sizeof err),
                 0);
    cr_assert_eq(st.phase, SLURM_QUEUED);
    cr_assert_eq(
        slurm_parse_job_line("JobId=12 JobState=COMPLETING ExitCode=0:0", &st, err, sizeof err), 0);
    cr_assert_eq(st.phase, SLURM_RUNNING);
    cr_assert_eq(slurm_parse_job_line("JobId=12 Reason=None", &st, err, sizeof err), -1);
    cr_assert(strstr(err, "no JobState"), "%s", err);
}

/* A stand-in sbatch: prints what a real one prints, or fails like one. */
Test(slurm_unit, submit_query_cancel_through_stand_ins) {
    char p[512], id[SLURM_JOB_ID_MAX], err[1024];
    snprintf(p, sizeof p, "%s/sbatch", dir);
    fake("sbatch", "echo 'sbatch: warning: something'; echo '4242;cluster'");
    cr_assert_eq(slurm_submit(p, "x.sh", id, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(id, "4242");
    fake("sbatch", "echo 'sbatch: error: Batch job submission failed: Invalid partition' >&2;"
                   " exit 1");
    cr_assert_eq(slurm_submit(p, "x.sh", id, err, sizeof err), -1);
    cr_assert(strstr(err, "exit status 1: sbatch: error: Batch job submission failed"), "%s", err);
    fake("sbatch", "echo 'Submitted batch job 12'");
    cr_assert_eq(slurm_submit(p, "x.sh", id, err, sizeof err), -1, "not --parsable output");
    cr_assert(strstr(err, "expected a job id"), "%s", err);
    snprintf(p, sizeof p, "%s/scontrol", dir);
    fake("scontrol", "[ \"$4\" = 7 ] && { echo 'JobId=7 JobName=bf-1 JobState=TIMEOUT "
                     "ExitCode=0:15'; exit 0; }\n"
                     "echo 'slurm_load_jobs error: Invalid job id specified' >&2; exit 1");
    slurm_status st;
    cr_assert_eq(slurm_query(p, "7", &st, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st.phase, SLURM_ENDED);
    cr_assert_str_eq(st.state, "TIMEOUT");
    cr_assert_eq(slurm_query(p, "8", &st, err, sizeof err), 0, "%s", err);
    cr_assert_eq(st.phase, SLURM_UNKNOWN, "a purged job is gone, not an error");
    snprintf(p, sizeof p, "%s/scancel", dir);
    fake("scancel", "echo \"$@\" > \"$(dirname \"$0\")/scancel.args\"");
    cr_assert_eq(slurm_cancel(p, "7", 1, err, sizeof err), 0, "%s", err);
    char a[512];
    snprintf(a, sizeof a, "%s/scancel.args", dir);
    cr_assert_str_eq(slurp(a), "--signal=TERM 7\n");
    cr_assert_eq(slurm_cancel(p, "7", 0, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(slurp(a), "7\n");
}

Test(slurm_unit, run_status_cap_and_timeout) {
    char out[16], err[256];
    const char *ok[] = {"sh", "-c", "printf 'abcdefghijklmnopqrstuvwxyz'; exit 3", NULL};
    cr_assert_eq(slurm_run(ok, 10, out, sizeof out, err, sizeof err), 3);
    cr_assert_str_eq(out, "abcdefghijklmno", "output is cut at the buffer");
    const char *slow[] = {"sleep", "30", NULL};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    cr_assert_eq(slurm_run(slow, 0.3, out, sizeof out, err, sizeof err), -1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    cr_assert(strstr(err, "sleep: no answer within"), "%s", err);
    cr_assert_lt((t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) * 1e-9, 5.0);
    const char *missing[] = {"/nonexistent/sbatch", NULL};
    char big[256];
    cr_assert_eq(slurm_run(missing, 10, big, sizeof big, err, sizeof err), -1);
    cr_assert(strstr(err, "cannot exec /nonexistent/sbatch: No such file"), "%s", err);
}
