/* tfevents — TensorBoard event files, written without TensorFlow.
 *
 * A file is a sequence of TFRecords (uint64 length, masked CRC-32C of the
 * length, the bytes, masked CRC-32C of the bytes; little-endian), each an
 * `Event` protocol buffer (tensorboard/compat/proto/event.proto): first one
 * with file_version "brain.Event:2", then scalars (Summary.Value with tag and
 * simple_value, the event's step and wall_time) and the HParams plugin's
 * summaries (tensorboard/plugins/hparams/plugin_data.proto, api.proto):
 * the experiment (swept parameters with their values, the metrics) and each
 * session's start (its parameter values) and end (its status). The protobuf
 * encoding is our own: only the fields named here are written.
 *
 * Layout bf uses (daemon, bfctl export, bfworker train): a job's folder
 * NAME-JOB/ holds the experiment; each trial's run is NAME-JOB/tTRIAL/.
 *
 * Functions return 0 or -1 with a message in err (common/errbuf.h). */
#ifndef BF_TFEVENTS_H
#define BF_TFEVENTS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* CRC-32C (Castagnoli, reflected, as iSCSI and TFRecord use): crc32c(0,
 * "123456789", 9) == 0xE3069283. crc is the running value (0 to start). */
uint32_t tfevents_crc32c(uint32_t crc, const void *data, size_t n);
/* TFRecord's masked CRC: rotate right by 15, plus 0xa282ead8. */
uint32_t tfevents_masked_crc(const void *data, size_t n);

/* The HParams status of a session (tensorboard.hparams.Status). */
typedef enum {
    TFEVENTS_STATUS_UNKNOWN = 0,
    TFEVENTS_STATUS_SUCCESS = 1,
    TFEVENTS_STATUS_FAILURE = 2,
    TFEVENTS_STATUS_RUNNING = 3
} tfevents_status;

typedef struct tfevents tfevents;

/* Creates folder dir (and its parents) and a new event file in it,
 * dir/events.out.tfevents.<unix time>.<host> (".2", ".3" appended when the
 * name is taken), and writes the file_version event. Free with
 * tfevents_close. */
int tfevents_create(const char *dir, double wall_time, tfevents **out, char *err, size_t errlen);
/* Opens an existing event file to append, after cutting it to `size` bytes
 * (where a record known to be complete ends). Fails when the file is
 * shorter than size. */
int tfevents_reopen(const char *path, long long size, tfevents **out, char *err, size_t errlen);
/* Flushes and closes; returns -1 when a write since the last flush failed. */
int tfevents_close(tfevents **w, char *err, size_t errlen);

const char *tfevents_path(const tfevents *w);
/* Bytes written so far (every record complete once flushed). */
long long tfevents_size(const tfevents *w);
/* Hands buffered records to the kernel (readers then see them). */
int tfevents_flush(tfevents *w, char *err, size_t errlen);

/* One scalar: tag, step, wall time (unix seconds), value (as float32,
 * TensorBoard's simple_value). */
int tfevents_scalar(tfevents *w, const char *tag, int64_t step, double wall_time, double value,
                    char *err, size_t errlen);

/* The experiment: `name`, the swept parameters of every trial (trials_params
 * is an array of {"key": value} objects; each key becomes an hparam whose
 * domain is the values seen, numbers as an interval when there are many),
 * and the metrics (tags in each session's own run). */
int tfevents_experiment(tfevents *w, const char *name, json_t *trials_params,
                        const char *const *metrics, size_t n_metrics, double wall_time, char *err,
                        size_t errlen);
/* The swept parameters of a job's trials, gathered a trial at a time for
 * tfevents_experiment_write (bfd reads a big job's trials a page per loop
 * round): each key with its distinct values. */
typedef struct tfevents_hparams tfevents_hparams;
/* A new, empty gathering; NULL when out of memory. Free with
 * tfevents_hparams_free (which nulls the pointer). */
tfevents_hparams *tfevents_hparams_new(void);
void tfevents_hparams_free(tfevents_hparams **h);
/* Adds one trial's params {"key": value} (borrowed). */
void tfevents_hparams_add(tfevents_hparams *h, json_t *params);
/* tfevents_experiment of the trials gathered in h. */
int tfevents_experiment_write(tfevents *w, const char *name, const tfevents_hparams *h,
                              const char *const *metrics, size_t n_metrics, double wall_time,
                              char *err, size_t errlen);
/* A session starts: params {"key": value}; numbers, strings and booleans go
 * as they are, lists and objects as their compact JSON text. */
int tfevents_session_start(tfevents *w, json_t *params, const char *group, double wall_time,
                           char *err, size_t errlen);
int tfevents_session_end(tfevents *w, tfevents_status status, double wall_time, char *err,
                         size_t errlen);

/* base/NAME-JOB, NAME reduced to letters, digits, '-', '_' and '.'
 * ("job" when nothing is left). Returns -1 when it does not fit. */
int tfevents_job_dir(char *buf, size_t len, const char *base, const char *job_name, int64_t job);

/* Encodes one scalar Event into buf (for tests and for callers that frame
 * records themselves). Returns its length, or 0 when cap is too small. */
size_t tfevents_encode_scalar(unsigned char *buf, size_t cap, const char *tag, int64_t step,
                              double wall_time, double value);

#endif
