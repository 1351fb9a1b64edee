/*
 * stub_libamdf.c -- a TEST DOUBLE of libamdf's C ABI for the hrx_amdf binding tests.
 *
 * This is NOT libamdf, NOT a provider, and is never shipped or installed. It exists
 * only so the tests can drive every LibamdfProvider method end to end through cffi
 * on a machine without libamdf or AMD hardware, and it CHECKS what the binding
 * passes: structure types and sizes, empty extension chains, reserved fields zero,
 * non-null pointers, handle kinds, ranges and object lifetimes. A violation returns
 * AMDF_STATUS_CODE_INVALID_ARGUMENT, records why (stub_last_error()) and counts
 * (stub_rejections()). stub_calls(name) counts calls per entry point and
 * stub_fail_next(name, status) makes the next call of an entry fail with status.
 *
 * Everything lives in host memory: one GPU endpoint and one XDNA endpoint; memory is
 * a memfd mapping (so an export is a real file descriptor and an import maps the
 * same pages); a user queue's ring, indices and doorbell are plain host memory and
 * nothing executes -- a status query or wait "consumes" up to the last doorbell
 * value; kernel queues accept submissions and retire them on refresh or wait.
 *
 * The declarations come from the binding itself: the test writes amdf_cdef.h (the
 * binding's cdef plus _Static_asserts of every size, alignment and field offset in
 * libamdf-abi.json, so gcc checks the layout too) and compiles
 *     cc -shared -fPIC -O1 -I<dir with amdf_cdef.h> -o libamdf_stub.so stub_libamdf.c
 * Options: -DSTUB_ABI_VERSION=n (the ABI the table reports), -DSTUB_API_BYTES=n (a
 * truncated base table), -DSTUB_NO_XDNA (a library built without XDNA).
 */

#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "amdf_cdef.h"

#ifndef STUB_ABI_VERSION
#define STUB_ABI_VERSION 5
#endif

#define EXPORT __attribute__((visibility("default")))

/* API-domain status codes (base.h). */
#define S_OK 0u
#define S_INVALID 1u
#define S_OUT_OF_RANGE 2u
#define S_UNSUPPORTED 3u
#define S_NOT_FOUND 4u
#define S_EXHAUSTED 5u
#define S_BUSY 6u
#define S_DEADLINE 7u
#define S_VERSION_MISMATCH 10u
#define S_BUFFER_TOO_SMALL 11u
#define S_FAILED_PRECONDITION 12u

/* Structure types (base.h, gpu.h, xdna.h). */
#define T_INSTANCE_CREATE_INFO 1u
#define T_ENDPOINT_INFO 2u
#define T_QUEUE_FAMILY_INFO 3u
#define T_MEMORY_CREATE_INFO 4u
#define T_MEMORY_INFO 5u
#define T_MEMORY_MAP_INFO 6u
#define T_HOST_MAPPING_INFO 7u
#define T_KERNEL_QUEUE_INFO 8u
#define T_KERNEL_QUEUE_STATUS 9u
#define T_MEMORY_PROFILE 10u
#define T_MEMORY_IMPORT_INFO 11u
#define T_MEMORY_EXPORT_INFO 12u
#define T_MEMORY_SITE 13u
#define T_MEMORY_PAIR_INFO 14u
#define T_USER_QUEUE_INFO 15u
#define T_USER_QUEUE_MAPPING_INFO 16u
#define T_USER_QUEUE_STATUS 17u
#define T_MEMORY_ACCESS_INFO 18u
#define T_MEMORY_SCOPE_INFO 19u
#define T_MEMORY_ACCESS_CAPABILITIES 20u
#define T_GPU_ENDPOINT_INFO 0x00020001u
#define T_GPU_DEVICE_CREATE_INFO 0x00020002u
#define T_GPU_DEVICE_INFO 0x00020003u
#define T_GPU_KERNEL_QUEUE_CREATE_INFO 0x00020004u
#define T_GPU_KERNEL_QUEUE_SUBMISSION_INFO 0x00020005u
#define T_GPU_USER_QUEUE_CREATE_INFO 0x00020007u
#define T_XDNA_ENDPOINT_INFO 0x00010001u
#define T_XDNA_DEVICE_CREATE_INFO 0x00010002u
#define T_XDNA_DEVICE_INFO 0x00010003u
#define T_XDNA_KERNEL_QUEUE_CREATE_INFO 0x00010008u
#define T_XDNA_KERNEL_QUEUE_SUBMISSION_INFO 0x00010009u
#define T_XDNA_CONTEXT_CREATE_INFO 0x0001000Au
#define T_XDNA_CONTEXT_INFO 0x0001000Bu
#define T_XDNA_CONTEXT_PLACEMENT_INFO 0x0001000Du

/* Enum values the stub reports or checks (memory.h, queue.h, xdna.h). */
#define CMD_PM4 1u
#define CMD_SDMA 2u
#define CMD_AQL 3u
#define CMD_XDNA 4u
#define PUB_USER 1u
#define PUB_KERNEL 2u
#define ACCESS_READ 1u
#define ACCESS_WRITE 2u
#define ACCESS_EXECUTE 4u
#define FLAG_HOST_VISIBLE 1u
#define FLAG_DEVICE_LOCAL 2u
#define FLAG_SHAREABLE 4u
#define FLAG_QUEUE_STORAGE 8u
#define FLAG_HOST_COHERENT 16u
#define FLAG_DEVICE_ADDRESS 32u
#define ROLE_CREATE 1u
#define ROLE_REGISTER 2u
#define ROLE_IMPORT 4u
#define ROLE_EXPORT 8u
#define ROLE_HOST_MAP 16u
#define EXT_DMA_BUF_FD 1u
#define NATIVE_EVENT_EVENTFD 1u
#define NATIVE_EVENT_WIN32 2u
#define KIND_GPU 1u
#define KIND_XDNA 2u
#define SCOPE_SYSTEM 0u
#define SCOPE_LOCAL 1u
#define SCOPE_PRIVATE 2u

#define MAX_ACCESSES 8
#define MAX_NOTIFICATIONS 64
#define PAGE 4096u

/* ------------------------------------------------------------- diagnostics */

static char last_error[512];

static amdf_status_t fail(uint32_t code, const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(last_error, sizeof(last_error), fmt, args);
  va_end(args);
  return (amdf_status_t)code;
}

/* A rejection of what the binding passed: counted, so tests can assert there was none. */
static uint64_t rejections;

static amdf_status_t reject(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  vsnprintf(last_error, sizeof(last_error), fmt, args);
  va_end(args);
  rejections++;
  return S_INVALID;
}

#define REJECT(...) return reject(__VA_ARGS__)
#define TRY(expr)                     \
  do {                                \
    amdf_status_t status_ = (expr);   \
    if (status_ != S_OK) return status_; \
  } while (0)

EXPORT const char* stub_last_error(void) { return last_error; }
EXPORT uint64_t stub_rejections(void) { return rejections; }

/* Per-entry call counts and one-shot injected failures, by entry name. */
#define MAX_ENTRIES 96
static struct {
  const char* name;
  uint64_t calls;
  amdf_status_t inject;
} entries[MAX_ENTRIES];

static int entry_index(const char* name) {
  for (int i = 0; i < MAX_ENTRIES; ++i) {
    if (entries[i].name == NULL) {
      entries[i].name = strdup(name);
      return i;
    }
    if (strcmp(entries[i].name, name) == 0) return i;
  }
  return -1;
}

/* Counts the call; returns a pending injected status (consuming it), else OK. */
static amdf_status_t enter(const char* name) {
  int i = entry_index(name);
  if (i < 0) return S_OK;
  entries[i].calls++;
  amdf_status_t injected = entries[i].inject;
  entries[i].inject = 0;
  if (injected) snprintf(last_error, sizeof(last_error), "%s: injected failure", name);
  return injected;
}

#define ENTER(name) TRY(enter(name))

EXPORT uint64_t stub_calls(const char* name) {
  int i = entry_index(name);
  return i < 0 ? 0 : entries[i].calls;
}

EXPORT void stub_fail_next(const char* name, uint64_t status) {
  int i = entry_index(name);
  if (i >= 0) entries[i].inject = status;
}

/* --------------------------------------------------------------- objects */

#define M_INSTANCE 0x494e5354u
#define M_ENDPOINT 0x454e4450u
#define M_DEVICE 0x44455643u
#define M_SCOPE 0x53434f50u
#define M_MEMORY 0x4d454d4fu
#define M_MAPPING 0x4d415050u
#define M_UQUEUE 0x55515545u
#define M_UMAPPING 0x554d4150u
#define M_KQUEUE 0x4b515545u
#define M_CONTEXT 0x43545854u

struct amdf_memory_scope_t {
  uint32_t magic;
  uint32_t kind;
  uint32_t profile_count;
  amdf_instance_t* instance;
  amdf_device_t* device;
  amdf_xdna_context_t* context;
};

struct amdf_instance_t {
  uint32_t magic;
  int endpoints;
  int memories;
  amdf_memory_scope_t system_scope;
};

struct amdf_endpoint_t {
  uint32_t magic;
  uint32_t index; /* 0: GPU, 1: XDNA */
  amdf_instance_t* instance;
  int devices;
};

struct amdf_device_t {
  uint32_t magic;
  uint32_t kind;
  amdf_endpoint_t* endpoint;
  uint64_t serial;
  int queues;
  int contexts;
  int memories;
  amdf_memory_scope_t local_scope;
};

struct amdf_memory_t {
  uint32_t magic;
  uint32_t profile;
  uint32_t memory_class;
  uint32_t access_count;
  amdf_memory_scope_t* scope;
  int fd;
  uint8_t* map_base; /* what munmap takes */
  uint64_t map_bytes;
  uint8_t* base; /* logical byte zero */
  uint64_t byte_length;
  uint64_t source_offset;
  uint64_t flags;
  uint64_t physical;
  amdf_device_t* devices[MAX_ACCESSES];
  uint32_t access[MAX_ACCESSES];
  uint64_t access_flags[MAX_ACCESSES];
  uint64_t kinds[MAX_ACCESSES];
  int mappings;
  int scratch_users;
};

struct amdf_host_mapping_t {
  uint32_t magic;
  uint32_t flags;
  amdf_memory_t* memory;
  uint64_t offset;
  uint64_t length;
};

struct amdf_xdna_context_t {
  uint32_t magic;
  uint32_t columns;
  uint32_t mode;
  amdf_device_t* device;
  uint64_t serial;
  int queues;
  int memories;
  amdf_memory_scope_t private_scope;
};

struct amdf_user_queue_t {
  uint32_t magic;
  uint32_t family;
  uint32_t command_type;
  uint32_t priority;
  uint32_t producer;
  amdf_device_t* device;
  amdf_memory_t* scratch;
  uint64_t serial;
  uint64_t ring_bytes;
  uint8_t* ring;
  volatile uint64_t* control; /* [0] read index, [8] write index, [16] doorbell */
  int mappings;
};

struct amdf_user_queue_mapping_t {
  uint32_t magic;
  amdf_user_queue_t* queue;
};

struct amdf_kernel_queue_t {
  uint32_t magic;
  uint32_t family;
  uint32_t command_type;
  uint32_t max_pending;
  amdf_device_t* device;
  amdf_xdna_context_t* context;
  uint64_t accepted;
  uint64_t retired;
  int notify_fd[MAX_NOTIFICATIONS];
  uint64_t notify_point[MAX_NOTIFICATIONS];
  int notifications;
};

static uint64_t serials;

static int is(const void* object, uint32_t magic) {
  return object != NULL && *(const uint32_t*)object == magic;
}

static amdf_status_t live(uint32_t magic, const char* what, const char* call, const void* object) {
  if (!is(object, magic)) REJECT("%s: not a live %s", call, what);
  return S_OK;
}

static void destroy_object(void* object) {
  *(uint32_t*)object = 0;
  free(object);
}

static int power_of_two(uint64_t value) { return value != 0 && (value & (value - 1)) == 0; }

/* -------------------------------------------------- structure validation */

static amdf_status_t check_input(const void* structure, uint32_t type, size_t size, const char* what) {
  const amdf_input_structure_t* header = structure;
  if (header == NULL) REJECT("%s: null input structure", what);
  if (header->type != type) REJECT("%s: type %u, expected %u", what, header->type, type);
  if (header->structure_size < size) REJECT("%s: structure_size %u < %zu", what, header->structure_size, size);
  if (header->next != NULL) REJECT("%s: unexpected extension chain", what);
  return S_OK;
}

static amdf_status_t check_output(const void* structure, uint32_t type, size_t size, const char* what) {
  const amdf_output_structure_t* header = structure;
  if (header == NULL) REJECT("%s: null output structure", what);
  if (header->type != type) REJECT("%s: output type %u, expected %u", what, header->type, type);
  if (header->structure_size < size) REJECT("%s: output structure_size %u < %zu", what, header->structure_size, size);
  if (header->next != NULL) REJECT("%s: unexpected output extension chain", what);
  return S_OK;
}

#define INPUT(p, T, type, what) TRY(check_input((p), (type), sizeof(T), (what)))
#define OUTPUT(p, T, type, what) TRY(check_output((p), (type), sizeof(T), (what)))

static amdf_instance_t* instance_of(const amdf_memory_scope_t* scope) { return scope->instance; }

static amdf_status_t check_accesses(const char* what, amdf_memory_scope_t* scope, uint32_t count,
                                    const amdf_memory_device_access_t* accesses) {
  if (count > MAX_ACCESSES) return fail(S_OUT_OF_RANGE, "%s: %u accesses", what, count);
  if (count != 0 && accesses == NULL) REJECT("%s: null accesses with count %u", what, count);
  if (count == 0 && accesses != NULL) REJECT("%s: accesses given with count 0", what);
  for (uint32_t i = 0; i < count; ++i) {
    const amdf_memory_device_access_t* access = &accesses[i];
    if (!is(access->device, M_DEVICE)) REJECT("%s[%u]: not a live device", what, i);
    if (access->device->endpoint->instance != instance_of(scope)) REJECT("%s[%u]: another instance's device", what, i);
    if (access->requirements.reserved != 0) REJECT("%s[%u]: reserved field nonzero", what, i);
    if (access->requirements.access & ~(ACCESS_READ | ACCESS_WRITE | ACCESS_EXECUTE))
      REJECT("%s[%u]: access bits 0x%x", what, i, access->requirements.access);
    if (access->requirements.flags & ~(uint64_t)(FLAG_QUEUE_STORAGE | FLAG_HOST_COHERENT | FLAG_DEVICE_ADDRESS))
      REJECT("%s[%u]: access flags 0x%llx", what, i, (unsigned long long)access->requirements.flags);
    if (access->requirements.address_kinds & ~(uint64_t)7)
      REJECT("%s[%u]: address kinds 0x%llx", what, i, (unsigned long long)access->requirements.address_kinds);
    for (uint32_t j = 0; j < i; ++j) {
      if (accesses[j].device == access->device) REJECT("%s[%u]: device listed twice", what, i);
    }
  }
  if (scope->kind == SCOPE_PRIVATE && (count != 1 || accesses[0].device != scope->device))
    return fail(S_UNSUPPORTED, "%s: a private scope takes exactly its own device", what);
  if (scope->kind == SCOPE_LOCAL) {
    int found = 0;
    for (uint32_t i = 0; i < count; ++i) found |= accesses[i].device == scope->device;
    if (!found) return fail(S_UNSUPPORTED, "%s: a local scope needs its own device among the consumers", what);
  }
  return S_OK;
}

/* ------------------------------------------------------------ endpoints */

static const amdf_endpoint_id_t endpoint_ids[2] = {{{0x1002, 1}}, {{0x1002, 2}}};

static int endpoint_for(const amdf_endpoint_id_t* id) {
  for (int i = 0; i < 2; ++i) {
    if (id->words[0] == endpoint_ids[i].words[0] && id->words[1] == endpoint_ids[i].words[1]) return i;
  }
  return -1;
}

static amdf_status_t stub_instance_create(const amdf_instance_create_info_t* info, amdf_instance_t** out) {
  ENTER("instance_create");
  INPUT(info, amdf_instance_create_info_t, T_INSTANCE_CREATE_INFO, "instance_create_info");
  if (out == NULL) REJECT("instance_create: null out_instance");
  if (info->reserved != 0) REJECT("instance_create_info: reserved field nonzero");
  if (info->native_lifetime > 1) REJECT("instance_create_info: native_lifetime %u", info->native_lifetime);
  const amdf_allocator_t* allocator = &info->host_allocator;
  int empty = allocator->user_data == NULL && allocator->allocate == NULL && allocator->resize == NULL &&
              allocator->free == NULL;
  if (!empty && (allocator->allocate == NULL || allocator->free == NULL))
    REJECT("instance_create_info: allocator without allocate/free");
  amdf_instance_t* instance = calloc(1, sizeof(*instance));
  if (instance == NULL) return S_EXHAUSTED;
  instance->magic = M_INSTANCE;
  instance->system_scope = (amdf_memory_scope_t){M_SCOPE, SCOPE_SYSTEM, 2, instance, NULL, NULL};
  *out = instance;
  return S_OK;
}

static amdf_status_t stub_instance_destroy(amdf_instance_t* instance) {
  ENTER("instance_destroy");
  if (!is(instance, M_INSTANCE)) REJECT("instance_destroy: not a live instance");
  if (instance->endpoints) return fail(S_BUSY, "instance_destroy: %d endpoints open", instance->endpoints);
  if (instance->memories) REJECT("instance_destroy: %d CPU-only memories still live", instance->memories);
  destroy_object(instance);
  return S_OK;
}

static void fill_summary(int index, amdf_endpoint_id_t* id, uint32_t* kind, char* name) {
  *id = endpoint_ids[index];
  *kind = index == 0 ? KIND_GPU : KIND_XDNA;
  snprintf(name, 128, "%s", index == 0 ? "stub gfx1151 (test double)" : "stub npu5 (test double)");
}

static amdf_status_t stub_endpoint_enumerate(amdf_instance_t* instance, uint32_t capacity,
                                             amdf_endpoint_summary_t* summaries, uint32_t* out_count) {
  ENTER("endpoint_enumerate");
  if (!is(instance, M_INSTANCE)) REJECT("endpoint_enumerate: not a live instance");
  if (out_count == NULL) REJECT("endpoint_enumerate: null out_count");
  if (capacity != 0 && summaries == NULL) REJECT("endpoint_enumerate: capacity %u with null summaries", capacity);
  for (uint32_t i = 0; i < capacity && i < 2; ++i) {
    memset(&summaries[i], 0, sizeof(summaries[i]));
    fill_summary((int)i, &summaries[i].id, &summaries[i].engine_kind, summaries[i].name);
  }
  *out_count = 2;
  return capacity < 2 ? S_BUFFER_TOO_SMALL : S_OK;
}

static amdf_status_t stub_endpoint_open(amdf_instance_t* instance, const amdf_endpoint_id_t* id,
                                        amdf_endpoint_t** out) {
  ENTER("endpoint_open");
  if (!is(instance, M_INSTANCE)) REJECT("endpoint_open: not a live instance");
  if (id == NULL || out == NULL) REJECT("endpoint_open: null argument");
  int index = endpoint_for(id);
  if (index < 0) return fail(S_NOT_FOUND, "endpoint_open: unknown id");
  amdf_endpoint_t* endpoint = calloc(1, sizeof(*endpoint));
  if (endpoint == NULL) return S_EXHAUSTED;
  endpoint->magic = M_ENDPOINT;
  endpoint->index = (uint32_t)index;
  endpoint->instance = instance;
  instance->endpoints++;
  *out = endpoint;
  return S_OK;
}

static amdf_status_t stub_endpoint_query_info(amdf_endpoint_t* endpoint, amdf_endpoint_info_t* out) {
  ENTER("endpoint_query_info");
  if (!is(endpoint, M_ENDPOINT)) REJECT("endpoint_query_info: not a live endpoint");
  OUTPUT(out, amdf_endpoint_info_t, T_ENDPOINT_INFO, "endpoint_info");
  fill_summary((int)endpoint->index, &out->id, &out->engine_kind, out->name);
  out->type_flags = endpoint->index == 0 ? 2u : 4u;
  out->pci = endpoint->index == 0 ? (amdf_pci_info_t){0x1002, 0x1586, 0x1002, 0x0001, 0xc1}
                                  : (amdf_pci_info_t){0x1022, 0x17f0, 0x1022, 0x0001, 0x11};
  out->queue_family_count = endpoint->index == 0 ? 3 : 1;
  out->native_identity.type = 1;
  out->native_identity.value.linux_device.major = endpoint->index == 0 ? 226 : 261;
  out->native_identity.value.linux_device.minor = endpoint->index == 0 ? 128 : 0;
  return S_OK;
}

static amdf_status_t stub_endpoint_close(amdf_endpoint_t* endpoint) {
  ENTER("endpoint_close");
  if (!is(endpoint, M_ENDPOINT)) REJECT("endpoint_close: not a live endpoint");
  if (endpoint->devices) return fail(S_BUSY, "endpoint_close: %d devices live", endpoint->devices);
  endpoint->instance->endpoints--;
  destroy_object(endpoint);
  return S_OK;
}

typedef struct family_t {
  uint32_t command_type;
  uint32_t modes;
  uint64_t roles;
  uint32_t producer_modes;
} family_t;

static const family_t gpu_families[3] = {
    {CMD_PM4, PUB_USER | PUB_KERNEL, 1 | 2 | 4 | 8, 2},
    {CMD_SDMA, PUB_USER | PUB_KERNEL, 2 | 4, 2},
    {CMD_AQL, PUB_USER, 1 | 4, 2 | 4},
};
static const family_t xdna_families[1] = {{CMD_XDNA, PUB_KERNEL, 1, 0}};

static const family_t* family_of(const amdf_endpoint_t* endpoint, uint32_t ordinal) {
  if (endpoint->index == 0) return ordinal < 3 ? &gpu_families[ordinal] : NULL;
  return ordinal < 1 ? &xdna_families[ordinal] : NULL;
}

static amdf_status_t stub_endpoint_query_queue_family_info(amdf_endpoint_t* endpoint, uint32_t ordinal,
                                                           amdf_queue_family_info_t* out) {
  ENTER("endpoint_query_queue_family_info");
  if (!is(endpoint, M_ENDPOINT)) REJECT("endpoint_query_queue_family_info: not a live endpoint");
  OUTPUT(out, amdf_queue_family_info_t, T_QUEUE_FAMILY_INFO, "queue_family_info");
  const family_t* family = family_of(endpoint, ordinal);
  if (family == NULL) return fail(S_OUT_OF_RANGE, "queue family %u", ordinal);
  out->ordinal = ordinal;
  out->command_type = family->command_type;
  out->publication_modes = family->modes;
  out->format_version = 1;
  out->format_features = family->command_type == CMD_PM4 ? 1 : 0;
  out->roles = family->roles;
  out->producer_modes = family->modes & PUB_USER ? family->producer_modes : 0;
  out->priority_capabilities = family->modes & PUB_USER ? (2u | 4u | 8u) : 0;
  out->user_queue_capabilities = family->modes & PUB_USER ? 1 : 0;
  out->kernel_queue_capabilities = 0;
  out->minimum_ring_byte_length = family->modes & PUB_USER ? PAGE : 0;
  out->maximum_ring_byte_length = family->modes & PUB_USER ? (1u << 20) : 0;
  out->ring_byte_length_alignment = family->modes & PUB_USER ? PAGE : 0;
  return S_OK;
}

/* ---------------------------------------------------------- extensions */

static amdf_status_t stub_gpu_endpoint_query_info(amdf_endpoint_t* endpoint, amdf_gpu_endpoint_info_t* out) {
  ENTER("gpu.endpoint_query_info");
  if (!is(endpoint, M_ENDPOINT)) REJECT("gpu.endpoint_query_info: not a live endpoint");
  OUTPUT(out, amdf_gpu_endpoint_info_t, T_GPU_ENDPOINT_INFO, "gpu_endpoint_info");
  if (endpoint->index != 0) return fail(S_UNSUPPORTED, "gpu.endpoint_query_info: not a GPU endpoint");
  out->gfx_ip.major = 11;
  out->gfx_ip.minor = 5;
  out->gfx_ip.stepping = 1;
  out->asic_revision = 0;
  out->compute.wavefront_size = 32;
  out->compute.compute_unit_count = 40;
  out->compute.maximum_wave_count_per_compute_unit = 32;
  out->compute.maximum_scratch_wave_count_per_compute_unit = 32;
  out->compute.local_data_share_byte_length = 65536;
  out->topology.xcc_count = 1;
  out->topology.shader_engine_count_per_xcc = 2;
  return S_OK;
}

static amdf_status_t device_create(const char* call, amdf_endpoint_t* endpoint, uint32_t index, uint32_t kind,
                                   amdf_device_t** out) {
  if (!is(endpoint, M_ENDPOINT)) REJECT("%s: not a live endpoint", call);
  if (out == NULL) REJECT("%s: null out_device", call);
  if (endpoint->index != index) return fail(S_UNSUPPORTED, "%s: wrong engine", call);
  amdf_device_t* device = calloc(1, sizeof(*device));
  if (device == NULL) return S_EXHAUSTED;
  device->magic = M_DEVICE;
  device->kind = kind;
  device->endpoint = endpoint;
  device->serial = ++serials;
  device->local_scope = (amdf_memory_scope_t){M_SCOPE, SCOPE_LOCAL, 1, endpoint->instance, device, NULL};
  endpoint->devices++;
  *out = device;
  return S_OK;
}

static amdf_status_t stub_gpu_device_create(amdf_endpoint_t* endpoint, const amdf_gpu_device_create_info_t* info,
                                            amdf_device_t** out) {
  ENTER("gpu.device_create");
  INPUT(info, amdf_gpu_device_create_info_t, T_GPU_DEVICE_CREATE_INFO, "gpu_device_create_info");
  if (info->reserved != 0) REJECT("gpu_device_create_info: reserved field nonzero");
  return device_create("gpu.device_create", endpoint, 0, KIND_GPU, out);
}

static amdf_status_t stub_xdna_device_create(amdf_endpoint_t* endpoint, const amdf_xdna_device_create_info_t* info,
                                             amdf_device_t** out) {
  ENTER("xdna.device_create");
  INPUT(info, amdf_xdna_device_create_info_t, T_XDNA_DEVICE_CREATE_INFO, "xdna_device_create_info");
  return device_create("xdna.device_create", endpoint, 1, KIND_XDNA, out);
}

static amdf_status_t stub_gpu_device_query_info(amdf_device_t* device, amdf_gpu_device_info_t* out) {
  ENTER("gpu.device_query_info");
  if (!is(device, M_DEVICE)) REJECT("gpu.device_query_info: not a live device");
  OUTPUT(out, amdf_gpu_device_info_t, T_GPU_DEVICE_INFO, "gpu_device_info");
  if (device->kind != KIND_GPU) return fail(S_UNSUPPORTED, "gpu.device_query_info: not a GPU device");
  out->id.words[0] = 0x1002;
  out->id.words[1] = device->serial;
  out->reset_epoch = 0;
  out->features = 1 | 2 | 4 | 8;
  return S_OK;
}

static amdf_status_t stub_xdna_endpoint_query_info(amdf_endpoint_t* endpoint, amdf_xdna_endpoint_info_t* out) {
  ENTER("xdna.endpoint_query_info");
  if (!is(endpoint, M_ENDPOINT)) REJECT("xdna.endpoint_query_info: not a live endpoint");
  OUTPUT(out, amdf_xdna_endpoint_info_t, T_XDNA_ENDPOINT_INFO, "xdna_endpoint_info");
  if (endpoint->index != 1) return fail(S_UNSUPPORTED, "xdna.endpoint_query_info: not an XDNA endpoint");
  out->architecture = 2; /* AIE2P */
  snprintf(out->target_id, sizeof(out->target_id), "%s", "npu5-test-double");
  return S_OK;
}

static amdf_status_t stub_xdna_device_query_info(amdf_device_t* device, amdf_xdna_device_info_t* out) {
  ENTER("xdna.device_query_info");
  if (!is(device, M_DEVICE)) REJECT("xdna.device_query_info: not a live device");
  OUTPUT(out, amdf_xdna_device_info_t, T_XDNA_DEVICE_INFO, "xdna_device_info");
  if (device->kind != KIND_XDNA) return fail(S_UNSUPPORTED, "xdna.device_query_info: not an XDNA device");
  out->id.words[0] = 0x1022;
  out->id.words[1] = device->serial;
  out->placement_modes = 1;
  out->array.column_origin = 0;
  out->array.column_count = 8;
  out->array.row_count = 6;
  out->array.column_stride = 1u << 25;
  out->context.scheduling_modes = 2 | 4;
  out->context.minimum_column_count = 1;
  out->context.maximum_column_count = 8;
  out->context.column_count_granularity = 1;
  out->instruction.maximum_byte_length = 1u << 20;
  out->instruction.address_alignment = 4;
  out->instruction.byte_length_granularity = 4;
  out->instruction.format.format = 2;
  out->instruction.format.version = 1;
  return S_OK;
}

static amdf_status_t stub_device_destroy(amdf_device_t* device) {
  ENTER("device_destroy");
  if (!is(device, M_DEVICE)) REJECT("device_destroy: not a live device");
  if (device->queues || device->contexts)
    return fail(S_BUSY, "device_destroy: %d queues, %d contexts live", device->queues, device->contexts);
  if (device->memories) REJECT("device_destroy: %d memories still use the device", device->memories);
  device->endpoint->devices--;
  destroy_object(device);
  return S_OK;
}

/* --------------------------------------------------------------- scopes */

static amdf_status_t enumerate_scopes(const char* call, uint32_t available, amdf_memory_scope_t* scope,
                                      uint32_t capacity, amdf_memory_scope_t** scopes, uint32_t* out_count) {
  if (out_count == NULL) REJECT("%s: null out_count", call);
  if (capacity != 0 && scopes == NULL) REJECT("%s: capacity %u with null scopes", call, capacity);
  if (capacity != 0 && available) scopes[0] = scope;
  *out_count = available;
  return capacity < available ? S_BUFFER_TOO_SMALL : S_OK;
}

static amdf_status_t stub_instance_enumerate_memory_scopes(amdf_instance_t* instance, uint32_t capacity,
                                                           amdf_memory_scope_t** scopes, uint32_t* out_count) {
  ENTER("instance_enumerate_memory_scopes");
  if (!is(instance, M_INSTANCE)) REJECT("instance_enumerate_memory_scopes: not a live instance");
  return enumerate_scopes("instance_enumerate_memory_scopes", 1, &instance->system_scope, capacity, scopes,
                          out_count);
}

static amdf_status_t stub_device_enumerate_memory_scopes(amdf_device_t* device, uint32_t capacity,
                                                         amdf_memory_scope_t** scopes, uint32_t* out_count) {
  ENTER("device_enumerate_memory_scopes");
  if (!is(device, M_DEVICE)) REJECT("device_enumerate_memory_scopes: not a live device");
  return enumerate_scopes("device_enumerate_memory_scopes", device->kind == KIND_GPU ? 1 : 0,
                          &device->local_scope, capacity, scopes, out_count);
}

static amdf_status_t stub_memory_scope_query_info(amdf_memory_scope_t* scope, amdf_memory_scope_info_t* out) {
  ENTER("memory_scope_query_info");
  if (!is(scope, M_SCOPE)) REJECT("memory_scope_query_info: not a scope");
  OUTPUT(out, amdf_memory_scope_info_t, T_MEMORY_SCOPE_INFO, "memory_scope_info");
  out->kind = scope->kind;
  out->memory_profile_count = scope->profile_count;
  memset(&out->physical_endpoint_id, 0, sizeof(out->physical_endpoint_id));
  if (scope->kind == SCOPE_LOCAL) out->physical_endpoint_id = endpoint_ids[scope->device->endpoint->index];
  return S_OK;
}

typedef struct profile_t {
  uint32_t memory_class;
  uint64_t roles;
  uint64_t guaranteed;
  uint64_t supported;
} profile_t;

static profile_t profile_of(const amdf_memory_scope_t* scope, uint32_t ordinal) {
  if (scope->kind == SCOPE_SYSTEM) {
    return ordinal == 0 ? (profile_t){1, ROLE_CREATE | ROLE_IMPORT | ROLE_EXPORT | ROLE_HOST_MAP, FLAG_HOST_VISIBLE,
                                      FLAG_HOST_VISIBLE | FLAG_SHAREABLE}
                        : (profile_t){1, ROLE_REGISTER | ROLE_HOST_MAP, FLAG_HOST_VISIBLE, FLAG_HOST_VISIBLE};
  }
  if (scope->kind == SCOPE_LOCAL) {
    return (profile_t){2, ROLE_CREATE | ROLE_EXPORT | ROLE_HOST_MAP, FLAG_DEVICE_LOCAL | FLAG_HOST_VISIBLE,
                       FLAG_DEVICE_LOCAL | FLAG_HOST_VISIBLE | FLAG_SHAREABLE};
  }
  return (profile_t){3, ROLE_CREATE | ROLE_HOST_MAP, FLAG_HOST_VISIBLE, FLAG_HOST_VISIBLE};
}

static amdf_status_t stub_memory_scope_query_device_profile(amdf_memory_scope_t* scope, uint32_t ordinal,
                                                            uint32_t access_count,
                                                            const amdf_memory_device_access_t* accesses,
                                                            amdf_memory_profile_t* out,
                                                            amdf_memory_access_capabilities_t* caps) {
  ENTER("memory_scope_query_device_profile");
  if (!is(scope, M_SCOPE)) REJECT("memory_scope_query_device_profile: not a scope");
  OUTPUT(out, amdf_memory_profile_t, T_MEMORY_PROFILE, "memory_profile");
  if (ordinal >= scope->profile_count) return fail(S_OUT_OF_RANGE, "profile %u", ordinal);
  TRY(check_accesses("memory_scope_query_device_profile accesses", scope, access_count, accesses));
  if (access_count != 0 && caps == NULL) REJECT("memory_scope_query_device_profile: null capabilities");
  for (uint32_t i = 0; i < access_count; ++i) {
    OUTPUT(&caps[i], amdf_memory_access_capabilities_t, T_MEMORY_ACCESS_CAPABILITIES, "memory_access_capabilities");
  }
  profile_t profile = profile_of(scope, ordinal);
  out->ordinal = ordinal;
  out->memory_class = profile.memory_class;
  out->roles = profile.roles;
  out->guaranteed_flags = profile.guaranteed;
  out->supported_flags = profile.supported;
  amdf_memory_construction_capabilities_t construction = {
      .maximum_byte_length = 1ull << 32,
      .byte_length_granularity = 1,
      .minimum_alignment = PAGE,
      .maximum_alignment = 1u << 21,
      .native_byte_length_granularity = PAGE,
  };
  if (profile.roles & ROLE_CREATE) out->allocation = construction;
  if (profile.roles & ROLE_IMPORT) out->import = construction;
  if (profile.roles & ROLE_REGISTER) {
    out->registration = construction;
    out->registration.registered_host_pointer_alignment = PAGE;
    out->registration.registered_host_cacheability = 2; /* WRITE_BACK */
  }
  out->host_mapping.maximum_byte_length = 1ull << 32;
  out->host_mapping.byte_offset_granularity = 1;
  out->host_mapping.byte_length_granularity = 1;
  out->host_mapping.supported_access = 3;
  out->external_memory_support_count = 0;
  if (profile.roles & (ROLE_IMPORT | ROLE_EXPORT)) {
    out->external_memory_support_count = 1;
    out->external_memory_support[0].type = EXT_DMA_BUF_FD;
    out->external_memory_support[0].flags = ((profile.roles & ROLE_IMPORT) ? 1u : 0u) |
                                            ((profile.roles & ROLE_EXPORT) ? 2u : 0u) | 4u;
    out->external_memory_support[0].source_offset_alignment = PAGE;
    out->external_memory_support[0].byte_length_alignment = 1;
  }
  for (uint32_t i = 0; i < access_count; ++i) {
    caps[i].guaranteed_access = 0;
    caps[i].supported_access = ACCESS_READ | ACCESS_WRITE | ACCESS_EXECUTE;
    caps[i].supported_flags = FLAG_QUEUE_STORAGE | FLAG_HOST_COHERENT | FLAG_DEVICE_ADDRESS;
    caps[i].address_kinds = accesses[i].device->kind == KIND_GPU ? 1 : 6;
    caps[i].device_address.address_bit_count = 48;
    caps[i].device_address.maximum_address = (1ull << 48) - 1;
    caps[i].device_address.minimum_alignment = PAGE;
  }
  return S_OK;
}

static amdf_status_t stub_memory_scope_query_pair_info(amdf_memory_scope_t* scope,
                                                       const amdf_memory_profile_pair_query_t* query,
                                                       amdf_memory_pair_info_t* out) {
  ENTER("memory_scope_query_pair_info");
  (void)scope;
  (void)query;
  (void)out;
  return fail(S_UNSUPPORTED, "memory_scope_query_pair_info: not in the test double");
}

/* --------------------------------------------------------------- memory */

static void count_memory(amdf_memory_t* memory, int delta) {
  for (uint32_t i = 0; i < memory->access_count; ++i) memory->devices[i]->memories += delta;
  if (memory->scope->kind == SCOPE_PRIVATE) memory->scope->context->memories += delta;
  if (memory->access_count == 0) memory->scope->instance->memories += delta;
}

static void record_accesses(amdf_memory_t* memory, uint32_t count, const amdf_memory_device_access_t* accesses) {
  memory->access_count = count;
  for (uint32_t i = 0; i < count; ++i) {
    memory->devices[i] = accesses[i].device;
    memory->access[i] = accesses[i].requirements.access;
    memory->access_flags[i] = accesses[i].requirements.flags;
    memory->kinds[i] = accesses[i].requirements.address_kinds;
  }
}

static uint64_t round_page(uint64_t value) { return (value + PAGE - 1) & ~(uint64_t)(PAGE - 1); }

static uint64_t physical_of(int fd) {
  struct stat st;
  return fstat(fd, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

static amdf_status_t stub_memory_create(amdf_memory_scope_t* scope, const amdf_memory_create_info_t* info,
                                        amdf_memory_t** out) {
  ENTER("memory_create");
  if (!is(scope, M_SCOPE)) REJECT("memory_create: not a scope");
  INPUT(info, amdf_memory_create_info_t, T_MEMORY_CREATE_INFO, "memory_create_info");
  if (out == NULL) REJECT("memory_create: null out_memory");
  if (info->reserved != 0) REJECT("memory_create_info: reserved field nonzero");
  if (info->memory_profile_ordinal >= scope->profile_count)
    return fail(S_OUT_OF_RANGE, "memory_create: profile %u", info->memory_profile_ordinal);
  profile_t profile = profile_of(scope, info->memory_profile_ordinal);
  if (profile.roles & ROLE_REGISTER) {
    if (info->registered_host_pointer == NULL) REJECT("memory_create_info: REGISTER without a host pointer");
    return fail(S_UNSUPPORTED, "memory_create: registration is not in the test double");
  }
  if (info->registered_host_pointer != NULL) REJECT("memory_create_info: host pointer for a CREATE profile");
  if (info->registered_host_cacheability != 0) REJECT("memory_create_info: cacheability for a CREATE profile");
  if (info->byte_length == 0) REJECT("memory_create_info: zero byte_length");
  if (info->minimum_alignment != 0 && !power_of_two(info->minimum_alignment))
    REJECT("memory_create_info: alignment %llu", (unsigned long long)info->minimum_alignment);
  if (info->required_flags & ~profile.supported)
    return fail(S_UNSUPPORTED, "memory_create: flags 0x%llx", (unsigned long long)info->required_flags);
  TRY(check_accesses("memory_create_info.accesses", scope, info->access_count, info->accesses));
  int fd = memfd_create("stub-libamdf", MFD_CLOEXEC);
  if (fd < 0) return ((amdf_status_t)3 << 32) | (uint32_t)errno;
  uint64_t bytes = round_page(info->byte_length);
  void* base = MAP_FAILED;
  if (ftruncate(fd, (off_t)bytes) == 0) base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  amdf_memory_t* memory = base == MAP_FAILED ? NULL : calloc(1, sizeof(*memory));
  if (memory == NULL) {
    int error = errno;
    if (base != MAP_FAILED) munmap(base, bytes);
    close(fd);
    return ((amdf_status_t)3 << 32) | (uint32_t)(error ? error : ENOMEM);
  }
  *memory = (amdf_memory_t){.magic = M_MEMORY,
                            .profile = info->memory_profile_ordinal,
                            .memory_class = profile.memory_class,
                            .scope = scope,
                            .fd = fd,
                            .map_base = base,
                            .map_bytes = bytes,
                            .base = base,
                            .byte_length = info->byte_length,
                            .flags = profile.guaranteed | info->required_flags,
                            .physical = physical_of(fd)};
  record_accesses(memory, info->access_count, info->accesses);
  count_memory(memory, 1);
  *out = memory;
  return S_OK;
}

static void release_fd(void* user_data, amdf_external_memory_type_t type, amdf_external_memory_payload_t payload) {
  (void)user_data;
  (void)type;
  close((int)payload.file_descriptor);
}

static amdf_status_t stub_memory_import(amdf_memory_scope_t* scope, const amdf_memory_import_info_t* info,
                                        amdf_external_memory_t* value, amdf_memory_t** out) {
  ENTER("memory_import");
  if (!is(scope, M_SCOPE)) REJECT("memory_import: not a scope");
  INPUT(info, amdf_memory_import_info_t, T_MEMORY_IMPORT_INFO, "memory_import_info");
  if (value == NULL || out == NULL) REJECT("memory_import: null argument");
  if (value->reserved != 0) REJECT("memory_import: external value reserved field nonzero");
  if (value->type != EXT_DMA_BUF_FD) return fail(S_UNSUPPORTED, "memory_import: external type %u", value->type);
  if (value->payload.file_descriptor < 0 || value->byte_length == 0) REJECT("memory_import: empty external value");
  if (info->memory_profile_ordinal >= scope->profile_count) return fail(S_OUT_OF_RANGE, "memory_import: profile");
  profile_t profile = profile_of(scope, info->memory_profile_ordinal);
  if (!(profile.roles & ROLE_IMPORT)) return fail(S_UNSUPPORTED, "memory_import: profile has no IMPORT role");
  TRY(check_accesses("memory_import_info.accesses", scope, info->access_count, info->accesses));
  int fd = (int)value->payload.file_descriptor;
  uint64_t bytes = round_page(value->source_byte_offset + value->byte_length);
  void* base = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) return ((amdf_status_t)3 << 32) | (uint32_t)errno;
  amdf_memory_t* memory = calloc(1, sizeof(*memory));
  if (memory == NULL) {
    munmap(base, bytes);
    return S_EXHAUSTED;
  }
  *memory = (amdf_memory_t){.magic = M_MEMORY,
                            .profile = info->memory_profile_ordinal,
                            .memory_class = profile.memory_class,
                            .scope = scope,
                            .fd = fd,
                            .map_base = base,
                            .map_bytes = bytes,
                            .base = (uint8_t*)base + value->source_byte_offset,
                            .byte_length = value->byte_length,
                            .source_offset = value->source_byte_offset,
                            .flags = profile.guaranteed | FLAG_SHAREABLE,
                            .physical = physical_of(fd)};
  record_accesses(memory, info->access_count, info->accesses);
  count_memory(memory, 1);
  memset(value, 0, sizeof(*value)); /* consumed: the fd now belongs to the memory */
  *out = memory;
  return S_OK;
}

static amdf_status_t stub_memory_query_info(amdf_memory_t* memory, amdf_memory_info_t* out) {
  ENTER("memory_query_info");
  TRY(live(M_MEMORY, "memory", "memory_query_info", memory));
  OUTPUT(out, amdf_memory_info_t, T_MEMORY_INFO, "memory_info");
  out->memory_profile_ordinal = memory->profile;
  out->memory_class = memory->memory_class;
  out->access_count = memory->access_count;
  out->flags = memory->flags;
  out->source_byte_offset = memory->source_offset;
  out->byte_length = memory->byte_length;
  out->alignment = PAGE;
  out->native_allocation_byte_length = memory->map_bytes;
  out->native_allocation_granularity = PAGE;
  out->physical_backing_id.words[0] = 0x57AB;
  out->physical_backing_id.words[1] = memory->physical;
  return S_OK;
}

static amdf_status_t stub_memory_query_access_info(amdf_memory_t* memory, uint32_t ordinal,
                                                   amdf_memory_access_info_t* out) {
  ENTER("memory_query_access_info");
  TRY(live(M_MEMORY, "memory", "memory_query_access_info", memory));
  OUTPUT(out, amdf_memory_access_info_t, T_MEMORY_ACCESS_INFO, "memory_access_info");
  if (ordinal >= memory->access_count) return fail(S_OUT_OF_RANGE, "access %u", ordinal);
  out->ordinal = ordinal;
  out->access = memory->access[ordinal];
  out->flags = memory->access_flags[ordinal];
  out->address_kinds = memory->kinds[ordinal];
  return S_OK;
}

static amdf_status_t stub_memory_query_address(amdf_memory_t* memory, uint32_t ordinal, uint32_t kind,
                                               uint64_t* out) {
  ENTER("memory_query_address");
  TRY(live(M_MEMORY, "memory", "memory_query_address", memory));
  if (out == NULL) REJECT("memory_query_address: null out_address");
  if (ordinal >= memory->access_count) return fail(S_OUT_OF_RANGE, "memory_query_address: access %u", ordinal);
  if (kind > 2) REJECT("memory_query_address: kind %u", kind);
  if (!(memory->kinds[ordinal] & (1ull << kind))) return fail(S_UNSUPPORTED, "memory_query_address: kind %u", kind);
  *out = (uint64_t)(uintptr_t)memory->base + (kind == 0 ? 0 : (uint64_t)kind << 48);
  return S_OK;
}

static amdf_status_t stub_memory_export(amdf_memory_t* memory, const amdf_memory_export_info_t* info,
                                        amdf_external_memory_t* out) {
  ENTER("memory_export");
  TRY(live(M_MEMORY, "memory", "memory_export", memory));
  INPUT(info, amdf_memory_export_info_t, T_MEMORY_EXPORT_INFO, "memory_export_info");
  if (out == NULL) REJECT("memory_export: null out_value");
  if (info->reserved != 0) REJECT("memory_export_info: reserved field nonzero");
  if (info->external_memory_type != EXT_DMA_BUF_FD)
    return fail(S_UNSUPPORTED, "memory_export: type %u", info->external_memory_type);
  if (info->byte_length == 0 || info->byte_offset > memory->byte_length ||
      info->byte_length > memory->byte_length - info->byte_offset)
    return fail(S_OUT_OF_RANGE, "memory_export: range");
  int fd = dup(memory->fd);
  if (fd < 0) return ((amdf_status_t)3 << 32) | (uint32_t)errno;
  memset(out, 0, sizeof(*out));
  out->type = EXT_DMA_BUF_FD;
  out->payload.file_descriptor = fd;
  out->source_byte_offset = memory->source_offset + info->byte_offset;
  out->byte_length = info->byte_length;
  out->physical_backing_id.words[0] = 0x57AB;
  out->physical_backing_id.words[1] = memory->physical;
  out->release = release_fd;
  return S_OK;
}

static void stub_external_memory_release(amdf_external_memory_t* value) {
  enter("external_memory_release");
  if (value == NULL || value->type == 0) return;
  if (value->release != NULL) value->release(value->release_user_data, value->type, value->payload);
  memset(value, 0, sizeof(*value));
}

static amdf_status_t check_site(const char* what, const amdf_memory_site_t* site) {
  INPUT(site, amdf_memory_site_t, T_MEMORY_SITE, what);
  if (site->reserved != 0) REJECT("%s: reserved field nonzero", what);
  if (site->kind == 0) {
    if (!is(site->value.device.memory, M_MEMORY)) REJECT("%s: not a live memory", what);
    if (site->value.device.access_ordinal >= site->value.device.memory->access_count)
      return fail(S_OUT_OF_RANGE, "%s: access %u", what, site->value.device.access_ordinal);
  } else if (site->kind == 1) {
    if (!is(site->value.host_mapping, M_MAPPING)) REJECT("%s: not a live host mapping", what);
  } else {
    REJECT("%s: kind %u", what, site->kind);
  }
  return S_OK;
}

static amdf_status_t stub_memory_query_pair_info(const amdf_memory_site_t* producer,
                                                 const amdf_memory_site_t* consumer, amdf_memory_pair_info_t* out) {
  ENTER("memory_query_pair_info");
  TRY(check_site("producer site", producer));
  TRY(check_site("consumer site", consumer));
  OUTPUT(out, amdf_memory_pair_info_t, T_MEMORY_PAIR_INFO, "memory_pair_info");
  out->flags = 1;
  out->release.kind = 1;
  out->acquire.kind = consumer->kind == 1 ? 2 : 1;
  out->acquire.executor = consumer->kind == 1 ? 3 : 0;
  out->acquire.host_operation = consumer->kind == 1 ? 2 : 0;
  out->atomic_reach.scope_32 = 3;
  out->atomic_reach.scope_64 = 3;
  return S_OK;
}

static amdf_status_t stub_memory_map(amdf_memory_t* memory, const amdf_memory_map_info_t* info,
                                     amdf_host_mapping_t** out) {
  ENTER("memory_map");
  TRY(live(M_MEMORY, "memory", "memory_map", memory));
  INPUT(info, amdf_memory_map_info_t, T_MEMORY_MAP_INFO, "memory_map_info");
  if (out == NULL) REJECT("memory_map: null out_mapping");
  if (info->flags == 0 || (info->flags & ~3u)) REJECT("memory_map_info: flags 0x%x", info->flags);
  if (info->byte_length == 0 || info->byte_offset > memory->byte_length ||
      info->byte_length > memory->byte_length - info->byte_offset)
    return fail(S_OUT_OF_RANGE, "memory_map: range");
  if (!(memory->flags & FLAG_HOST_VISIBLE)) return fail(S_FAILED_PRECONDITION, "memory_map: not host visible");
  amdf_host_mapping_t* mapping = calloc(1, sizeof(*mapping));
  if (mapping == NULL) return S_EXHAUSTED;
  *mapping = (amdf_host_mapping_t){M_MAPPING, info->flags, memory, info->byte_offset, info->byte_length};
  memory->mappings++;
  *out = mapping;
  return S_OK;
}

static amdf_status_t stub_host_mapping_query_info(amdf_host_mapping_t* mapping, amdf_host_mapping_info_t* out) {
  ENTER("host_mapping_query_info");
  if (!is(mapping, M_MAPPING)) REJECT("host_mapping_query_info: not a live mapping");
  OUTPUT(out, amdf_host_mapping_info_t, T_HOST_MAPPING_INFO, "host_mapping_info");
  out->flags = mapping->flags;
  out->cacheability = 2;
  out->pointer = mapping->memory->base + mapping->offset;
  out->memory_byte_offset = mapping->offset;
  out->byte_length = mapping->length;
  out->byte_offset_granularity = 1;
  out->byte_length_granularity = 1;
  out->cache_line_size = 64;
  out->flush.kind = 1;
  out->invalidate.kind = 1;
  return S_OK;
}

static amdf_status_t stub_host_mapping_cache_control(amdf_host_mapping_t* mapping, uint32_t operation,
                                                     uint64_t offset, uint64_t length) {
  ENTER("host_mapping_cache_control");
  if (!is(mapping, M_MAPPING)) REJECT("host_mapping_cache_control: not a live mapping");
  if (operation != 1 && operation != 2) REJECT("host_mapping_cache_control: operation %u", operation);
  if (offset > mapping->length || length > mapping->length - offset)
    return fail(S_OUT_OF_RANGE, "host_mapping_cache_control: range");
  if (length && operation == 1 && !(mapping->flags & 2)) return fail(S_FAILED_PRECONDITION, "flush without WRITE");
  if (length && operation == 2 && !(mapping->flags & 1)) return fail(S_FAILED_PRECONDITION, "invalidate without READ");
  __sync_synchronize();
  return S_OK;
}

static amdf_status_t stub_host_mapping_destroy(amdf_host_mapping_t* mapping) {
  ENTER("host_mapping_destroy");
  if (!is(mapping, M_MAPPING)) REJECT("host_mapping_destroy: not a live mapping");
  mapping->memory->mappings--;
  destroy_object(mapping);
  return S_OK;
}

static amdf_status_t stub_memory_destroy(amdf_memory_t* memory) {
  /* libamdf consumes the handle on every result but an API BUSY: an injected native
     failure is returned after the object is gone. */
  amdf_status_t injected = enter("memory_destroy");
  if (injected == S_BUSY) return injected;
  TRY(live(M_MEMORY, "memory", "memory_destroy", memory));
  if (memory->mappings) REJECT("memory_destroy: %d host mappings still live", memory->mappings);
  if (memory->scratch_users) REJECT("memory_destroy: scratch of %d live queues", memory->scratch_users);
  count_memory(memory, -1);
  munmap(memory->map_base, memory->map_bytes);
  close(memory->fd);
  destroy_object(memory);
  return injected;
}

/* ---------------------------------------------------------- user queues */

static amdf_status_t stub_gpu_user_queue_create(amdf_device_t* device, const amdf_gpu_user_queue_create_info_t* info,
                                                amdf_user_queue_t** out) {
  ENTER("gpu.user_queue_create");
  if (!is(device, M_DEVICE) || device->kind != KIND_GPU) REJECT("gpu.user_queue_create: not a live GPU device");
  INPUT(info, amdf_gpu_user_queue_create_info_t, T_GPU_USER_QUEUE_CREATE_INFO, "gpu_user_queue_create_info");
  if (out == NULL) REJECT("gpu.user_queue_create: null out_queue");
  if (info->reserved != 0) REJECT("gpu_user_queue_create_info: reserved field nonzero");
  const family_t* family = family_of(device->endpoint, info->queue_family_ordinal);
  if (family == NULL) return fail(S_OUT_OF_RANGE, "gpu.user_queue_create: family %u", info->queue_family_ordinal);
  if (!(family->modes & PUB_USER)) return fail(S_UNSUPPORTED, "gpu.user_queue_create: family has no USER mode");
  if (info->priority < 1 || info->priority > 3) REJECT("gpu_user_queue_create_info: priority %u", info->priority);
  if (info->producer_mode < 1 || info->producer_mode > 2)
    REJECT("gpu_user_queue_create_info: producer_mode %u", info->producer_mode);
  if (!(family->producer_modes & (1u << info->producer_mode)))
    return fail(S_UNSUPPORTED, "gpu.user_queue_create: producer mode %u", info->producer_mode);
  if (info->required_capabilities & ~(uint64_t)1)
    return fail(S_UNSUPPORTED, "gpu.user_queue_create: capabilities 0x%llx",
                (unsigned long long)info->required_capabilities);
  uint64_t ring = info->ring_byte_length ? info->ring_byte_length : PAGE;
  if (!power_of_two(ring) || ring < PAGE || ring > (1u << 20))
    return fail(S_OUT_OF_RANGE, "gpu.user_queue_create: ring %llu", (unsigned long long)ring);
  const amdf_gpu_queue_scratch_t* scratch = &info->scratch;
  if (scratch->reserved != 0) REJECT("gpu_queue_scratch: reserved field nonzero");
  if (scratch->memory != NULL) {
    TRY(live(M_MEMORY, "memory", "gpu_queue_scratch.memory", scratch->memory));
    if (scratch->access_ordinal >= scratch->memory->access_count ||
        scratch->memory->devices[scratch->access_ordinal] != device)
      REJECT("gpu_queue_scratch: access %u is not this device's", scratch->access_ordinal);
    if (scratch->byte_length == 0 || scratch->byte_offset > scratch->memory->byte_length ||
        scratch->byte_length > scratch->memory->byte_length - scratch->byte_offset)
      REJECT("gpu_queue_scratch: range outside the memory");
  } else if (scratch->access_ordinal || scratch->byte_offset || scratch->byte_length ||
             scratch->maximum_private_segment_byte_length || scratch->maximum_wave_count) {
    REJECT("gpu_queue_scratch: fields set without memory");
  }
  amdf_user_queue_t* queue = calloc(1, sizeof(*queue));
  void* storage = aligned_alloc(PAGE, ring);
  void* control = aligned_alloc(64, 64);
  if (queue == NULL || storage == NULL || control == NULL) {
    free(queue);
    free(storage);
    free(control);
    return S_EXHAUSTED;
  }
  memset(storage, 0, ring);
  memset(control, 0, 64);
  *queue = (amdf_user_queue_t){.magic = M_UQUEUE,
                               .family = info->queue_family_ordinal,
                               .command_type = family->command_type,
                               .priority = info->priority,
                               .producer = info->producer_mode,
                               .device = device,
                               .scratch = scratch->memory,
                               .serial = ++serials,
                               .ring_bytes = ring,
                               .ring = storage,
                               .control = control};
  if (scratch->memory) scratch->memory->scratch_users++;
  device->queues++;
  *out = queue;
  return S_OK;
}

static amdf_status_t stub_user_queue_query_info(amdf_user_queue_t* queue, amdf_user_queue_info_t* out) {
  ENTER("user_queue_query_info");
  TRY(live(M_UQUEUE, "user queue", "user_queue_query_info", queue));
  OUTPUT(out, amdf_user_queue_info_t, T_USER_QUEUE_INFO, "user_queue_info");
  out->device_id.words[0] = 0x1002;
  out->device_id.words[1] = queue->device->serial;
  out->queue_id.words[0] = 0x51;
  out->queue_id.words[1] = queue->serial;
  out->queue_family_ordinal = queue->family;
  out->command_type = queue->command_type;
  out->format_version = 1;
  out->format_features = queue->command_type == CMD_PM4 ? 1 : 0;
  out->producer_mode = queue->producer;
  out->priority = queue->priority;
  out->capabilities = 1;
  out->roles = family_of(queue->device->endpoint, queue->family)->roles;
  out->ring_byte_length = queue->ring_bytes;
  return S_OK;
}

static amdf_status_t stub_user_queue_map(amdf_user_queue_t* queue, amdf_device_t* producer,
                                         amdf_user_queue_mapping_t** out) {
  ENTER("user_queue_map");
  TRY(live(M_UQUEUE, "user queue", "user_queue_map", queue));
  if (out == NULL) REJECT("user_queue_map: null out_mapping");
  if (producer != NULL) return fail(S_UNSUPPORTED, "user_queue_map: only host producers in the test double");
  amdf_user_queue_mapping_t* mapping = calloc(1, sizeof(*mapping));
  if (mapping == NULL) return S_EXHAUSTED;
  *mapping = (amdf_user_queue_mapping_t){M_UMAPPING, queue};
  queue->mappings++;
  *out = mapping;
  return S_OK;
}

static amdf_status_t stub_user_queue_mapping_query_info(amdf_user_queue_mapping_t* mapping,
                                                        amdf_user_queue_mapping_info_t* out) {
  ENTER("user_queue_mapping_query_info");
  if (!is(mapping, M_UMAPPING)) REJECT("user_queue_mapping_query_info: not a live mapping");
  OUTPUT(out, amdf_user_queue_mapping_info_t, T_USER_QUEUE_MAPPING_INFO, "user_queue_mapping_info");
  amdf_user_queue_t* queue = mapping->queue;
  out->queue_id.words[0] = 0x51;
  out->queue_id.words[1] = queue->serial;
  out->command_type = queue->command_type;
  out->format_version = 1;
  out->ring_address = (uint64_t)(uintptr_t)queue->ring;
  out->ring_byte_length = queue->ring_bytes;
  out->read_index_address = (uint64_t)(uintptr_t)&queue->control[0];
  out->write_index_address = (uint64_t)(uintptr_t)&queue->control[1];
  out->doorbell_address = (uint64_t)(uintptr_t)&queue->control[2];
  out->index_bits = 64;
  out->doorbell_bits = 64;
  return S_OK;
}

static amdf_status_t stub_user_queue_mapping_destroy(amdf_user_queue_mapping_t* mapping) {
  ENTER("user_queue_mapping_destroy");
  if (!is(mapping, M_UMAPPING)) REJECT("user_queue_mapping_destroy: not a live mapping");
  mapping->queue->mappings--;
  destroy_object(mapping);
  return S_OK;
}

/* The "consumer": everything up to the last doorbell value is consumed at once. */
static void consume(amdf_user_queue_t* queue) {
  uint64_t doorbell = queue->control[2];
  if (doorbell > queue->control[0]) queue->control[0] = doorbell;
}

static amdf_status_t stub_user_queue_query_status(amdf_user_queue_t* queue, amdf_user_queue_status_t* out) {
  ENTER("user_queue_query_status");
  TRY(live(M_UQUEUE, "user queue", "user_queue_query_status", queue));
  OUTPUT(out, amdf_user_queue_status_t, T_USER_QUEUE_STATUS, "user_queue_status");
  consume(queue);
  out->state = 1;
  out->reserved = 0;
  out->reset_epoch = 0;
  out->producer_index = queue->control[1];
  out->consumed_index = queue->control[0];
  out->terminal_status = 0;
  return S_OK;
}

static amdf_status_t stub_user_queue_wait_consumed(amdf_user_queue_t* queue, uint64_t index, uint64_t timeout,
                                                   uint64_t poll) {
  ENTER("user_queue_wait_consumed");
  (void)timeout;
  (void)poll;
  TRY(live(M_UQUEUE, "user queue", "user_queue_wait_consumed", queue));
  consume(queue);
  if (index > queue->control[1]) REJECT("user_queue_wait_consumed: index %llu was never published",
                                        (unsigned long long)index);
  if (queue->control[0] >= index) return S_OK;
  return fail(S_DEADLINE, "user_queue_wait_consumed: the doorbell never reached %llu", (unsigned long long)index);
}

static amdf_status_t stub_user_queue_destroy(amdf_user_queue_t* queue) {
  /* libamdf consumes the handle on every result but an API BUSY: an injected native
     failure is returned after the object is gone. */
  amdf_status_t injected = enter("user_queue_destroy");
  if (injected == S_BUSY) return injected;
  TRY(live(M_UQUEUE, "user queue", "user_queue_destroy", queue));
  consume(queue);
  if (queue->mappings) return fail(S_BUSY, "user_queue_destroy: %d mappings live", queue->mappings);
  if (queue->control[0] < queue->control[1]) return fail(S_BUSY, "user_queue_destroy: unconsumed publication");
  if (queue->scratch) queue->scratch->scratch_users--;
  queue->device->queues--;
  free(queue->ring);
  free((void*)queue->control);
  destroy_object(queue);
  return injected;
}

/* -------------------------------------------------------- kernel queues */

static amdf_status_t kqueue_new(amdf_device_t* device, amdf_xdna_context_t* context, uint32_t family_ordinal,
                                uint32_t max_pending, const char* call, amdf_kernel_queue_t** out) {
  if (out == NULL) REJECT("%s: null out_queue", call);
  const family_t* family = family_of(device->endpoint, family_ordinal);
  if (family == NULL) return fail(S_OUT_OF_RANGE, "%s: family %u", call, family_ordinal);
  if (!(family->modes & PUB_KERNEL)) return fail(S_UNSUPPORTED, "%s: family has no KERNEL mode", call);
  amdf_kernel_queue_t* queue = calloc(1, sizeof(*queue));
  if (queue == NULL) return S_EXHAUSTED;
  queue->magic = M_KQUEUE;
  queue->family = family_ordinal;
  queue->command_type = family->command_type;
  queue->max_pending = max_pending ? max_pending : 4096;
  queue->device = device;
  queue->context = context;
  if (context) {
    context->queues++;
  } else {
    device->queues++;
  }
  *out = queue;
  return S_OK;
}

static amdf_status_t stub_gpu_kernel_queue_create(amdf_device_t* device,
                                                  const amdf_gpu_kernel_queue_create_info_t* info,
                                                  amdf_kernel_queue_t** out) {
  ENTER("gpu.kernel_queue_create");
  if (!is(device, M_DEVICE) || device->kind != KIND_GPU) REJECT("gpu.kernel_queue_create: not a live GPU device");
  INPUT(info, amdf_gpu_kernel_queue_create_info_t, T_GPU_KERNEL_QUEUE_CREATE_INFO, "gpu_kernel_queue_create_info");
  return kqueue_new(device, NULL, info->queue_family_ordinal, info->maximum_pending_submission_count,
                    "gpu.kernel_queue_create", out);
}

static amdf_status_t stub_xdna_kernel_queue_create(amdf_xdna_context_t* context,
                                                   const amdf_xdna_kernel_queue_create_info_t* info,
                                                   amdf_kernel_queue_t** out) {
  ENTER("xdna.kernel_queue_create");
  if (!is(context, M_CONTEXT)) REJECT("xdna.kernel_queue_create: not a live context");
  INPUT(info, amdf_xdna_kernel_queue_create_info_t, T_XDNA_KERNEL_QUEUE_CREATE_INFO, "xdna_kernel_queue_create_info");
  return kqueue_new(context->device, context, info->queue_family_ordinal, info->maximum_pending_submission_count,
                    "xdna.kernel_queue_create", out);
}

/* amdf_gpu_kernel_command_t and amdf_xdna_kernel_command_t have one layout. */
static amdf_status_t submit(const char* call, amdf_kernel_queue_t* queue, uint32_t count, uint32_t reserved,
                            const amdf_gpu_kernel_command_t* commands, uint64_t* out) {
  if (out == NULL) REJECT("%s: null out_submission", call);
  if (reserved != 0) REJECT("%s: submission reserved field nonzero", call);
  if (count == 0 || count > 16) REJECT("%s: %u commands", call, count);
  if (commands == NULL) REJECT("%s: null commands", call);
  for (uint32_t i = 0; i < count; ++i) {
    const amdf_gpu_kernel_command_t* command = &commands[i];
    amdf_memory_t* memory = command->memory;
    if (!is(memory, M_MEMORY)) REJECT("%s: command %u memory is not live", call, i);
    if (command->reserved != 0) REJECT("%s: command %u reserved field nonzero", call, i);
    if (command->access_ordinal >= memory->access_count) REJECT("%s: command %u access ordinal", call, i);
    if (memory->devices[command->access_ordinal] != queue->device) REJECT("%s: command %u: another device", call, i);
    if (!(memory->access[command->access_ordinal] & ACCESS_EXECUTE)) REJECT("%s: command %u: no EXECUTE", call, i);
    if (queue->context && memory->scope != &queue->context->private_scope)
      REJECT("%s: command %u: not the context's private memory", call, i);
    if (command->byte_length == 0 || (command->byte_offset | command->byte_length) & 3 ||
        command->byte_offset > memory->byte_length || command->byte_length > memory->byte_length - command->byte_offset)
      REJECT("%s: command %u range", call, i);
  }
  if (queue->accepted - queue->retired >= queue->max_pending) return fail(S_BUSY, "%s: pending window full", call);
  *out = ++queue->accepted;
  return S_OK;
}

static amdf_status_t stub_gpu_kernel_queue_submit(amdf_kernel_queue_t* queue,
                                                  const amdf_gpu_kernel_queue_submission_info_t* info, uint64_t* out) {
  ENTER("gpu.kernel_queue_submit");
  TRY(live(M_KQUEUE, "kernel queue", "gpu.kernel_queue_submit", queue));
  if (queue->context) REJECT("gpu.kernel_queue_submit: an XDNA queue");
  INPUT(info, amdf_gpu_kernel_queue_submission_info_t, T_GPU_KERNEL_QUEUE_SUBMISSION_INFO, "gpu_submission_info");
  return submit("gpu.kernel_queue_submit", queue, info->command_count, info->reserved, info->commands, out);
}

static amdf_status_t stub_xdna_kernel_queue_submit(amdf_kernel_queue_t* queue,
                                                   const amdf_xdna_kernel_queue_submission_info_t* info,
                                                   uint64_t* out) {
  ENTER("xdna.kernel_queue_submit");
  TRY(live(M_KQUEUE, "kernel queue", "xdna.kernel_queue_submit", queue));
  if (!queue->context) REJECT("xdna.kernel_queue_submit: a GPU queue");
  INPUT(info, amdf_xdna_kernel_queue_submission_info_t, T_XDNA_KERNEL_QUEUE_SUBMISSION_INFO, "xdna_submission_info");
  return submit("xdna.kernel_queue_submit", queue, info->command_count, info->reserved,
                (const amdf_gpu_kernel_command_t*)info->commands, out);
}

static void signal_notifications(amdf_kernel_queue_t* queue) {
  int kept = 0;
  for (int i = 0; i < queue->notifications; ++i) {
    if (queue->notify_point[i] <= queue->retired) {
      uint64_t one = 1;
      if (write(queue->notify_fd[i], &one, sizeof(one)) < 0) { /* a full eventfd stays readable */ }
    } else {
      queue->notify_fd[kept] = queue->notify_fd[i];
      queue->notify_point[kept++] = queue->notify_point[i];
    }
  }
  queue->notifications = kept;
}

static void retire_all(amdf_kernel_queue_t* queue) {
  queue->retired = queue->accepted;
  signal_notifications(queue);
}

static amdf_status_t stub_kernel_queue_query_info(amdf_kernel_queue_t* queue, amdf_kernel_queue_info_t* out) {
  ENTER("kernel_queue_query_info");
  TRY(live(M_KQUEUE, "kernel queue", "kernel_queue_query_info", queue));
  OUTPUT(out, amdf_kernel_queue_info_t, T_KERNEL_QUEUE_INFO, "kernel_queue_info");
  out->device_id.words[0] = queue->context ? 0x1022 : 0x1002;
  out->device_id.words[1] = queue->device->serial;
  out->queue_family_ordinal = queue->family;
  out->command_type = queue->command_type;
  out->maximum_pending_submission_count = queue->max_pending;
  out->maximum_command_count = 16;
  out->notification_types = 2; /* EVENTFD */
  return S_OK;
}

static void fill_kstatus(amdf_kernel_queue_t* queue, amdf_kernel_queue_status_t* out) {
  out->retired_submission = queue->retired;
  out->state = 1;
  out->reserved = 0;
  out->terminal_status = 0;
}

static amdf_status_t stub_kernel_queue_query_status(amdf_kernel_queue_t* queue, amdf_kernel_queue_status_t* out) {
  ENTER("kernel_queue_query_status");
  TRY(live(M_KQUEUE, "kernel queue", "kernel_queue_query_status", queue));
  OUTPUT(out, amdf_kernel_queue_status_t, T_KERNEL_QUEUE_STATUS, "kernel_queue_status");
  fill_kstatus(queue, out);
  return S_OK;
}

static amdf_status_t stub_kernel_queue_refresh_status(amdf_kernel_queue_t* queue, amdf_kernel_queue_status_t* out) {
  ENTER("kernel_queue_refresh_status");
  TRY(live(M_KQUEUE, "kernel queue", "kernel_queue_refresh_status", queue));
  OUTPUT(out, amdf_kernel_queue_status_t, T_KERNEL_QUEUE_STATUS, "kernel_queue_status");
  retire_all(queue);
  fill_kstatus(queue, out);
  return S_OK;
}

static amdf_status_t stub_kernel_queue_wait(amdf_kernel_queue_t* queue, uint64_t submission, uint64_t timeout,
                                            uint64_t poll) {
  ENTER("kernel_queue_wait");
  (void)poll;
  TRY(live(M_KQUEUE, "kernel queue", "kernel_queue_wait", queue));
  if (submission == 0) REJECT("kernel_queue_wait: submission 0");
  if (submission > queue->accepted) return fail(S_OUT_OF_RANGE, "kernel_queue_wait: %llu was never accepted",
                                                (unsigned long long)submission);
  if (queue->retired >= submission) return S_OK;
  if (timeout == 0) return fail(S_DEADLINE, "kernel_queue_wait: not retired after one poll");
  retire_all(queue);
  return S_OK;
}

static amdf_status_t stub_kernel_queue_request_notification(amdf_kernel_queue_t* queue, uint64_t submission,
                                                            const amdf_native_event_t* event) {
  ENTER("kernel_queue_request_notification");
  TRY(live(M_KQUEUE, "kernel queue", "kernel_queue_request_notification", queue));
  if (event == NULL) REJECT("kernel_queue_request_notification: null event");
  if (event->type == NATIVE_EVENT_WIN32) return fail(S_UNSUPPORTED, "kernel_queue_request_notification: WIN32");
  if (event->type != NATIVE_EVENT_EVENTFD) REJECT("kernel_queue_request_notification: event type %u", event->type);
  if (event->reserved != 0) REJECT("kernel_queue_request_notification: reserved field nonzero");
  if (event->payload.file_descriptor < 0 || event->payload.file_descriptor > INT32_MAX)
    REJECT("kernel_queue_request_notification: fd %lld", (long long)event->payload.file_descriptor);
  if (submission == 0) REJECT("kernel_queue_request_notification: submission 0");
  if (submission > queue->accepted) return fail(S_OUT_OF_RANGE, "kernel_queue_request_notification: unaccepted");
  if (queue->notifications == MAX_NOTIFICATIONS) return S_EXHAUSTED;
  queue->notify_fd[queue->notifications] = (int)event->payload.file_descriptor;
  queue->notify_point[queue->notifications++] = submission;
  signal_notifications(queue);
  return S_OK;
}

static amdf_status_t stub_kernel_queue_destroy(amdf_kernel_queue_t* queue) {
  /* libamdf consumes the handle on every result but an API BUSY: an injected native
     failure is returned after the object is gone. */
  amdf_status_t injected = enter("kernel_queue_destroy");
  if (injected == S_BUSY) return injected;
  TRY(live(M_KQUEUE, "kernel queue", "kernel_queue_destroy", queue));
  if (queue->retired < queue->accepted) return fail(S_BUSY, "kernel_queue_destroy: unretired submissions");
  if (queue->context) {
    queue->context->queues--;
  } else {
    queue->device->queues--;
  }
  destroy_object(queue);
  return injected;
}

/* ------------------------------------------------------------- contexts */

static amdf_status_t stub_xdna_context_create(amdf_device_t* device, const amdf_xdna_context_create_info_t* info,
                                              amdf_xdna_context_t** out) {
  ENTER("xdna.context_create");
  if (!is(device, M_DEVICE) || device->kind != KIND_XDNA) REJECT("xdna.context_create: not a live XDNA device");
  INPUT(info, amdf_xdna_context_create_info_t, T_XDNA_CONTEXT_CREATE_INFO, "xdna_context_create_info");
  if (out == NULL) REJECT("xdna.context_create: null out_context");
  if (info->logical_column_count < 1 || info->logical_column_count > 8)
    return fail(S_OUT_OF_RANGE, "xdna.context_create: %u columns", info->logical_column_count);
  if (info->physical_column_origin != UINT32_MAX && info->physical_column_origin != 0)
    return fail(S_UNSUPPORTED, "xdna.context_create: origin %u", info->physical_column_origin);
  if (info->acceptable_scheduling_modes == 0 || (info->acceptable_scheduling_modes & ~7u))
    REJECT("xdna_context_create_info: modes 0x%x", info->acceptable_scheduling_modes);
  uint32_t modes = info->acceptable_scheduling_modes & (2u | 4u);
  if (modes == 0) return fail(S_UNSUPPORTED, "xdna.context_create: no acceptable scheduling mode");
  amdf_xdna_context_t* context = calloc(1, sizeof(*context));
  if (context == NULL) return S_EXHAUSTED;
  context->magic = M_CONTEXT;
  context->columns = info->logical_column_count;
  context->mode = modes & 2u ? 2u : 4u;
  context->device = device;
  context->serial = ++serials;
  context->private_scope = (amdf_memory_scope_t){M_SCOPE, SCOPE_PRIVATE, 1, device->endpoint->instance, device,
                                                 context};
  device->contexts++;
  *out = context;
  return S_OK;
}

static amdf_status_t stub_xdna_context_query_info(amdf_xdna_context_t* context, amdf_xdna_context_info_t* out) {
  ENTER("xdna.context_query_info");
  TRY(live(M_CONTEXT, "context", "xdna.context_query_info", context));
  OUTPUT(out, amdf_xdna_context_info_t, T_XDNA_CONTEXT_INFO, "xdna_context_info");
  out->id.words[0] = 0xC7;
  out->id.words[1] = context->serial;
  out->device_id.words[0] = 0x1022;
  out->device_id.words[1] = context->device->serial;
  out->scheduling_mode = context->mode;
  out->logical_column_count = context->columns;
  out->row_count = 6;
  return S_OK;
}

static amdf_status_t stub_xdna_context_query_placement_info(amdf_xdna_context_t* context,
                                                            amdf_xdna_context_placement_info_t* out) {
  ENTER("xdna.context_query_placement_info");
  TRY(live(M_CONTEXT, "context", "xdna.context_query_placement_info", context));
  OUTPUT(out, amdf_xdna_context_placement_info_t, T_XDNA_CONTEXT_PLACEMENT_INFO, "xdna_context_placement_info");
  out->column_origin = 0;
  out->column_count = 8;
  return S_OK;
}

static amdf_status_t stub_xdna_context_enumerate_memory_scopes(amdf_xdna_context_t* context, uint32_t capacity,
                                                               amdf_memory_scope_t** scopes, uint32_t* out_count) {
  ENTER("xdna.context_enumerate_memory_scopes");
  TRY(live(M_CONTEXT, "context", "xdna.context_enumerate_memory_scopes", context));
  return enumerate_scopes("xdna.context_enumerate_memory_scopes", 1, &context->private_scope, capacity, scopes,
                          out_count);
}

static amdf_status_t stub_xdna_context_destroy(amdf_xdna_context_t* context) {
  ENTER("xdna.context_destroy");
  TRY(live(M_CONTEXT, "context", "xdna.context_destroy", context));
  if (context->queues) return fail(S_BUSY, "xdna.context_destroy: %d queues live", context->queues);
  if (context->memories) REJECT("xdna.context_destroy: %d private memories live", context->memories);
  context->device->contexts--;
  destroy_object(context);
  return S_OK;
}

/* --------------------------------------------------------------- tables */

static const amdf_gpu_api_t gpu_table = {
    sizeof(amdf_gpu_api_t),       1,
    stub_gpu_endpoint_query_info, stub_gpu_device_create,
    stub_gpu_device_query_info,   stub_gpu_kernel_queue_create,
    stub_gpu_kernel_queue_submit, stub_gpu_user_queue_create,
};

static const amdf_xdna_api_t xdna_table = {
    sizeof(amdf_xdna_api_t),
    1,
    stub_xdna_endpoint_query_info,
    stub_xdna_device_create,
    stub_xdna_device_query_info,
    stub_xdna_kernel_queue_create,
    stub_xdna_kernel_queue_submit,
    stub_xdna_context_create,
    stub_xdna_context_query_info,
    stub_xdna_context_query_placement_info,
    stub_xdna_context_enumerate_memory_scopes,
    stub_xdna_context_destroy,
};

static amdf_status_t stub_query_extension(uint32_t id, uint32_t minimum, uint32_t maximum, const void** out) {
  ENTER("query_extension");
  if (out == NULL) REJECT("query_extension: null out_extension_api");
  const void* table = NULL;
  if (id == 2) table = &gpu_table;
#ifdef STUB_NO_XDNA
  (void)xdna_table;
#else
  if (id == 1) table = &xdna_table;
#endif
  if (table == NULL) return fail(S_UNSUPPORTED, "query_extension: extension %u not built", id);
  if (minimum > 1 || maximum < 1)
    return fail(S_VERSION_MISMATCH, "query_extension: versions [%u, %u]", minimum, maximum);
  *out = table;
  return S_OK;
}

#ifndef STUB_API_BYTES
#define STUB_API_BYTES sizeof(amdf_api_t)
#endif

static const amdf_api_t api_table = {
    .structure_size = STUB_API_BYTES,
    .abi_version = STUB_ABI_VERSION,
    .instance_create = stub_instance_create,
    .instance_destroy = stub_instance_destroy,
    .endpoint_enumerate = stub_endpoint_enumerate,
    .endpoint_open = stub_endpoint_open,
    .endpoint_query_info = stub_endpoint_query_info,
    .endpoint_close = stub_endpoint_close,
    .query_extension = stub_query_extension,
    .endpoint_query_queue_family_info = stub_endpoint_query_queue_family_info,
    .device_destroy = stub_device_destroy,
    .instance_enumerate_memory_scopes = stub_instance_enumerate_memory_scopes,
    .device_enumerate_memory_scopes = stub_device_enumerate_memory_scopes,
    .memory_scope_query_info = stub_memory_scope_query_info,
    .memory_scope_query_device_profile = stub_memory_scope_query_device_profile,
    .memory_create = stub_memory_create,
    .memory_import = stub_memory_import,
    .memory_query_info = stub_memory_query_info,
    .memory_query_access_info = stub_memory_query_access_info,
    .memory_export = stub_memory_export,
    .external_memory_release = stub_external_memory_release,
    .memory_query_pair_info = stub_memory_query_pair_info,
    .memory_map = stub_memory_map,
    .host_mapping_query_info = stub_host_mapping_query_info,
    .host_mapping_cache_control = stub_host_mapping_cache_control,
    .host_mapping_destroy = stub_host_mapping_destroy,
    .memory_destroy = stub_memory_destroy,
    .kernel_queue_query_info = stub_kernel_queue_query_info,
    .kernel_queue_query_status = stub_kernel_queue_query_status,
    .kernel_queue_wait = stub_kernel_queue_wait,
    .kernel_queue_destroy = stub_kernel_queue_destroy,
    .user_queue_query_info = stub_user_queue_query_info,
    .user_queue_map = stub_user_queue_map,
    .user_queue_mapping_query_info = stub_user_queue_mapping_query_info,
    .user_queue_mapping_destroy = stub_user_queue_mapping_destroy,
    .user_queue_query_status = stub_user_queue_query_status,
    .user_queue_wait_consumed = stub_user_queue_wait_consumed,
    .user_queue_destroy = stub_user_queue_destroy,
    .memory_query_address = stub_memory_query_address,
    .memory_scope_query_pair_info = stub_memory_scope_query_pair_info,
    .kernel_queue_refresh_status = stub_kernel_queue_refresh_status,
    .kernel_queue_request_notification = stub_kernel_queue_request_notification,
};

EXPORT amdf_status_t amdf_query_api(amdf_abi_version_t minimum, amdf_abi_version_t maximum, const amdf_api_t** out) {
  ENTER("amdf_query_api");
  if (out == NULL) REJECT("amdf_query_api: null out_api");
  if (minimum > STUB_ABI_VERSION || maximum < STUB_ABI_VERSION)
    return fail(S_VERSION_MISMATCH, "amdf_query_api: [%u, %u] excludes %u", minimum, maximum, STUB_ABI_VERSION);
  *out = &api_table;
  return S_OK;
}
