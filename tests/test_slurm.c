/* test_slurm — the Slurm launcher's pieces that need no cluster: the batch
 * script bfd writes (every #SBATCH line, quoting, mode 0600, and that sh
 * parses it into the exact argv), the parsing of `scontrol show job -o`
 * lines into phases and exit codes, slurm_run's exit status, output cap and
 * timeout, and sbatch output parsing through a stand-in sbatch. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

Test(slurm_unit, batch_script) {
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/slurm.sh", dir);
    slurm_batch b = {.trial = 17,
                     .attempt = 2,
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
                     .token = "0123456789abcdef0123456789abcdef",
                     .out_dir = "/h/trials/17",
                     .log_path = "/h/logs/17.log",
                     .cwd = "/work"};
    cr_assert_eq(slurm_write_script(path, &b, err, sizeof err), 0, "%s", err);
    struct stat sb;
    cr_assert_eq(stat(path, &sb), 0);
    cr_assert_eq(sb.st_mode & 0777, 0600);
    const char *s = slurp(path);
    const char *want[] = {
        "#!/bin/sh\n", "#SBATCH --job-name=bf-17\n", "#SBATCH --ntasks=4\n", "#SBATCH --nodes=2\n",
        /* MPI's TCP on bfd's subnet, unless the user set it */
        ": \"${OMPI_MCA_btl_tcp_if_include:=198.18.0.0/24}\" "
        "\"${OMPI_MCA_oob_tcp_if_include:=198.18.0.0/24}\"\n"
        "export OMPI_MCA_btl_tcp_if_include OMPI_MCA_oob_tcp_if_include\n",
        "#SBATCH --cpus-per-task=2\n", "#SBATCH --gpus-per-task=1\n",
        /* 3601 s rounds up to 61 minutes */
        "#SBATCH --time=1:01:00\n", "#SBATCH --partition=gpu\n",
        "#SBATCH --output=/h/logs/17.log\n", "#SBATCH --open-mode=append\n",
        "#SBATCH --chdir=/work\n", "OMP_NUM_THREADS=3\n",
        "exec 'srun' --kill-on-bad-exit=1 '--mpi=pmix' '/opt/bf it'\\''s/bfworker'"
        " 'run' '--trial' '17' '--connect' 'ipc:///h/worker.sock' '--token'"
        " '0123456789abcdef0123456789abcdef' '--out' '/h/trials/17'"
        " '--attempt' '2'\n"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(s, want[i]), "missing %s in:\n%s", want[i], s);
    /* sh reads the quoted words back exactly: run it with srun = printf */
    b.srun = "printf";
    b.mpi = "";
    b.gpus_per_rank = 0;
    b.time_limit_s = 0;
    b.partition = NULL;
    b.nodes = 0;
    b.mpi_cidr = "";
    cr_assert_eq(slurm_write_script(path, &b, err, sizeof err), 0, "%s", err);
    s = slurp(path);
    cr_assert_null(strstr(s, "--nodes"), "nodes not given: no --nodes");
    cr_assert_null(strstr(s, "OMPI_MCA"), "no subnet: Open MPI chooses");
    cr_assert_null(strstr(s, "--gpus-per-task"), "no GPUs: no --gpus-per-task");
    cr_assert_null(strstr(s, "--time"), "no limit: no --time");
    cr_assert_null(strstr(s, "--partition"));
    cr_assert_null(strstr(s, "--mpi"));
    char out[2048];
    const char *argv[] = {"sh", NULL, NULL};
    /* the quoted words after srun's own options, read back by sh one per [] */
    FILE *f = fopen(path, "r");
    cr_assert(f);
    char body[4096];
    size_t n = fread(body, 1, sizeof body - 1, f);
    body[n] = '\0';
    fclose(f);
    char *ex = strstr(body, "exec 'printf' --kill-on-bad-exit=1 ");
    cr_assert(ex, "%s", body);
    char script2[512];
    snprintf(script2, sizeof script2, "%s/echo.sh", dir);
    f = fopen(script2, "w");
    cr_assert(f);
    fprintf(f, "set -- %s\nfor a; do printf '[%%s]' \"$a\"; done\n",
            ex + strlen("exec 'printf' --kill-on-bad-exit=1 "));
    fclose(f);
    argv[1] = script2;
    cr_assert_eq(slurm_run(argv, 10, out, sizeof out, err, sizeof err), 0, "%s", err);
    cr_assert_str_eq(out, "[/opt/bf it's/bfworker][run][--trial][17][--connect]"
                          "[ipc:///h/worker.sock][--token][0123456789abcdef0123456789abcdef]"
                          "[--out][/h/trials/17][--attempt][2]");
    /* more nodes than ranks, and a subnet that is not a CIDR, are refused */
    b.nodes = 5;
    cr_assert_eq(slurm_write_script(path, &b, err, sizeof err), -1);
    cr_assert(strstr(err, "nodes 5"), "%s", err);
    b.nodes = 2;
    b.mpi_cidr = "eth0; rm -rf /";
    cr_assert_eq(slurm_write_script(path, &b, err, sizeof err), -1);
    cr_assert(strstr(err, "not a CIDR"), "%s", err);
    b.mpi_cidr = NULL;
    /* values #SBATCH lines cannot carry are refused, naming the field */
    b.cwd = "/my work";
    cr_assert_eq(slurm_write_script(path, &b, err, sizeof err), -1);
    cr_assert(strstr(err, "working directory '/my work' holds a space"), "%s", err);
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
static void fake(const char *name, const char *body) {
    char p[512];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    cr_assert(f);
    fprintf(f, "#!/bin/sh\n%s\n", body);
    fclose(f);
    cr_assert_eq(chmod(p, 0700), 0);
}

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
    cr_assert_eq(slurm_run(missing, 10, big, sizeof big, err, sizeof err), 127);
    cr_assert(strstr(big, "exec /nonexistent/sbatch"), "%s", big);
}
