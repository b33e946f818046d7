/* slurm — bfd's Slurm launcher: writes a job array's batch script, submits it
 * with sbatch, asks scontrol how the Slurm job stands and cancels it with
 * scancel. Each call runs one short Slurm command synchronously (fork, exec,
 * read its output through a pipe, waitpid) with a hard timeout, so bfd's
 * event loop can call it between polls without a thread.
 * Functions return 0 or -1 with a message in err that names the command and
 * carries its own output. */
#ifndef SLURM_H
#define SLURM_H

#include <stddef.h>

#define SLURM_JOB_ID_MAX 32

/* Runs `sbatch --parsable script` and puts the Slurm job id in id. */
int slurm_submit(const char *sbatch, const char *script, char id[SLURM_JOB_ID_MAX], char *err,
                 size_t errlen);

/* One job array (slurm_write_array): trials of one bf job, ready at once,
 * as `sbatch --array=0-(n-1)`. The batch script reads line
 * SLURM_ARRAY_TASK_ID + 1 of the manifest beside it ("TRIAL ATTEMPT TOKEN
 * STAGE", STAGE "-" for a whole trial) and runs that attempt as `srun
 * bfworker run --trial ... --attempt ...` (with --stage-root/--stage for a
 * stage), its output appended to home/logs/TRIAL.log, its folder
 * home/trials/TRIAL. Every value is shell-quoted. */
typedef struct slurm_array {
    long long job;          /* the bf job: Slurm job name bf-jJOB */
    int ranks;              /* --ntasks */
    int nodes;              /* --nodes (omitted when 0; at most ranks) */
    int cpus_per_rank;      /* --cpus-per-task (omitted when 0) */
    int gpus_per_rank;      /* --gpus-per-task (omitted when 0) */
    long long time_limit_s; /* --time, rounded up to minutes (omitted when 0) */
    int threads;            /* OMP_NUM_THREADS of each task */
    const char *partition;  /* --partition ("" or NULL: the cluster's default) */
    const char *srun;       /* srun program */
    const char *mpi;        /* srun --mpi=... ("" or NULL: not passed) */
    const char *mpi_cidr;   /* ranks > 1: the subnet MPI's TCP uses (OMPI_MCA_btl_tcp_if_include
                               and oob_tcp_if_include unless set; "" or NULL: not set) */
    const char *bfworker;   /* the bfworker program, as the compute node sees it */
    const char *endpoint;   /* the worker endpoint bfd binds */
    const char *home;       /* $BF_HOME (trials/, logs/, stages/ under it) */
    const char *cwd;        /* the job's working directory */
} slurm_array;

typedef struct slurm_array_task {
    long long trial;
    int attempt;
    const char *token;
    const char *stage; /* NULL or "": the whole trial */
} slurm_array_task;

/* Writes the manifest (one line per task, mode 0600: it holds the tokens)
 * and then the batch script (mode 0600) for tasks[0..n-1]. */
int slurm_write_array(const char *script, const char *manifest, const slurm_array *a,
                      const slurm_array_task *tasks, int n, char *err, size_t errlen);

/* The cluster's MaxArraySize from `scontrol show config` into *out (an array
 * holds at most that many tasks, indices 0..MaxArraySize-1). -1 with a
 * message when scontrol fails or prints none (the caller falls back). */
int slurm_max_array_size(const char *scontrol, int *out, char *err, size_t errlen);

typedef enum {
    SLURM_QUEUED,  /* PENDING, CONFIGURING, REQUEUED, SUSPENDED ... : not running yet */
    SLURM_RUNNING, /* RUNNING, COMPLETING */
    SLURM_ENDED,   /* a final state; state and exit_code say how */
    SLURM_UNKNOWN  /* the controller no longer knows the job (purged) */
} slurm_phase;

typedef struct slurm_status {
    slurm_phase phase;
    char state[32]; /* Slurm's JobState, e.g. COMPLETED, FAILED, TIMEOUT */
    int exit_code;  /* the batch script's exit status (ExitCode=N:S), -1 unknown */
    int signal;     /* the signal that ended it (the S of N:S), 0 none */
} slurm_status;

/* `scontrol show job -o ID`: how the job stands. A job the controller says is
 * invalid (finished long ago and purged) is SLURM_UNKNOWN, not an error. */
int slurm_query(const char *scontrol, const char *id, slurm_status *out, char *err, size_t errlen);

/* Parses one line of `scontrol show job -o` output (exposed for tests). */
int slurm_parse_job_line(const char *line, slurm_status *out, char *err, size_t errlen);

/* `scontrol show job -o ARRAY` for an array of n tasks: how each stands,
 * into st[0..n-1] (a task the controller no longer lists is SLURM_UNKNOWN;
 * an array purged altogether makes every task so). One command for the
 * whole array, however many tasks it has. */
int slurm_query_array(const char *scontrol, const char *array_id, slurm_status *st, int n,
                      char *err, size_t errlen);

/* Parses `scontrol show job -o` output of one array into st[0..n-1]: each
 * line's ArrayTaskId (N, or a list of N and N-M, with an optional %LIMIT)
 * gets its JobState and ExitCode; unlisted tasks are SLURM_UNKNOWN.
 * Exposed for tests. */
int slurm_parse_array_lines(const char *text, slurm_status *st, int n, char *err, size_t errlen);

/* Splits a job id "ARRAY_TASK" into the array's id and the task index; 0
 * when id is an array task, -1 when it is a plain job id. */
int slurm_array_task_of(const char *id, char array[SLURM_JOB_ID_MAX], int *task);

/* Cancels every task of an array: `scancel --state=PENDING ARRAY` (tasks
 * not started), then `scancel --signal=TERM ARRAY` when term (running
 * tasks checkpoint and exit 75) or `scancel ARRAY`. */
int slurm_cancel_array(const char *scancel, const char *array_id, int term, char *err,
                       size_t errlen);

/* `scancel --signal=TERM ID` when term (the worker checkpoints and exits 75),
 * else `scancel ID`. */
int slurm_cancel(const char *scancel, const char *id, int term, char *err, size_t errlen);

/* Runs argv (argv[0] looked up in PATH), stdin /dev/null, stdout and stderr
 * into out (NUL-terminated, cut at outlen - 1), killed after timeout_s.
 * Returns the exit status (0-255), or -1 with err when it could not run or
 * was killed. */
int slurm_run(const char *const *argv, double timeout_s, char *out, size_t outlen, char *err,
              size_t errlen);

#endif
