"""The cffi declarations (ABI mode) of libamdf's public C interface.

Written from the public headers of ROCm/hrx-system, ``libamdf/include/amdf``
(amdf.h, api.h, base.h, gpu.h, memory.h, native_event.h, queue.h, xdna.h) at the
commits in :data:`HEADER_COMMITS`, for ABI version :data:`ABI_VERSION`
(``AMDF_ABI_VERSION_5``), GPU extension 1 and XDNA extension 1. Every public struct,
union, typedef and function-pointer table is declared, in header order, field for
field, including the anonymous nested structs and unions where the headers lay them
out. Enumerations are declared as their fixed-width typedefs (as the headers do);
their values live in :mod:`hrx_amdf.constants` and :data:`STRUCTURE_TYPES`.

The layout is checked, not trusted: :func:`layout_mismatches` compares what cffi
computes for these declarations (sizes, alignments, field offsets, field sizes and
field order) with ``libamdf-abi.json``, the facts compiled from the same headers
with gcc for x86_64-linux-gnu, shipped beside this module.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import cffi

from ..constants import TARGET_ABI_VERSION

#: ABI version these declarations describe.
ABI_VERSION = TARGET_ABI_VERSION

#: The header commits of ROCm/hrx-system the declarations were written from.
HEADER_REPOSITORY = "ROCm/hrx-system"
HEADER_COMMITS: dict[str, str] = {
    "libamdf/include/amdf/amdf.h": "2a3d1256c3cf135fd8b0f2132aa6b009936d8139",
    "libamdf/include/amdf/api.h": "2a3d1256c3cf135fd8b0f2132aa6b009936d8139",
    "libamdf/include/amdf/base.h": "2a3d1256c3cf135fd8b0f2132aa6b009936d8139",
    "libamdf/include/amdf/gpu.h": "2a3d1256c3cf135fd8b0f2132aa6b009936d8139",
    "libamdf/include/amdf/memory.h": "7ce623095886f94dfac02c4bab2db3dfbb9eec92",
    "libamdf/include/amdf/native_event.h": "2a3d1256c3cf135fd8b0f2132aa6b009936d8139",
    "libamdf/include/amdf/queue.h": "2a3d1256c3cf135fd8b0f2132aa6b009936d8139",
    "libamdf/include/amdf/xdna.h": "2a3d1256c3cf135fd8b0f2132aa6b009936d8139",
}

#: The layout facts shipped with the package (a copy of
#: ``shared/reference/libamdf-abi.json``).
ABI_FACTS_PATH = Path(__file__).with_name("libamdf-abi.json")

#: ``amdf_structure_type_t`` of every extensible structure the binding fills or
#: reads, with the C name of the value (checked against the ABI facts).
STRUCTURE_TYPES: dict[str, tuple[str, int]] = {
    "amdf_instance_create_info_t": ("AMDF_STRUCTURE_TYPE_INSTANCE_CREATE_INFO", 1),
    "amdf_endpoint_info_t": ("AMDF_STRUCTURE_TYPE_ENDPOINT_INFO", 2),
    "amdf_queue_family_info_t": ("AMDF_STRUCTURE_TYPE_QUEUE_FAMILY_INFO", 3),
    "amdf_memory_create_info_t": ("AMDF_STRUCTURE_TYPE_MEMORY_CREATE_INFO", 4),
    "amdf_memory_info_t": ("AMDF_STRUCTURE_TYPE_MEMORY_INFO", 5),
    "amdf_memory_map_info_t": ("AMDF_STRUCTURE_TYPE_MEMORY_MAP_INFO", 6),
    "amdf_host_mapping_info_t": ("AMDF_STRUCTURE_TYPE_HOST_MAPPING_INFO", 7),
    "amdf_kernel_queue_info_t": ("AMDF_STRUCTURE_TYPE_KERNEL_QUEUE_INFO", 8),
    "amdf_kernel_queue_status_t": ("AMDF_STRUCTURE_TYPE_KERNEL_QUEUE_STATUS", 9),
    "amdf_memory_profile_t": ("AMDF_STRUCTURE_TYPE_MEMORY_PROFILE", 10),
    "amdf_memory_import_info_t": ("AMDF_STRUCTURE_TYPE_MEMORY_IMPORT_INFO", 11),
    "amdf_memory_export_info_t": ("AMDF_STRUCTURE_TYPE_MEMORY_EXPORT_INFO", 12),
    "amdf_memory_site_t": ("AMDF_STRUCTURE_TYPE_MEMORY_SITE", 13),
    "amdf_memory_pair_info_t": ("AMDF_STRUCTURE_TYPE_MEMORY_PAIR_INFO", 14),
    "amdf_user_queue_info_t": ("AMDF_STRUCTURE_TYPE_USER_QUEUE_INFO", 15),
    "amdf_user_queue_mapping_info_t": ("AMDF_STRUCTURE_TYPE_USER_QUEUE_MAPPING_INFO", 16),
    "amdf_user_queue_status_t": ("AMDF_STRUCTURE_TYPE_USER_QUEUE_STATUS", 17),
    "amdf_memory_access_info_t": ("AMDF_STRUCTURE_TYPE_MEMORY_ACCESS_INFO", 18),
    "amdf_memory_scope_info_t": ("AMDF_STRUCTURE_TYPE_MEMORY_SCOPE_INFO", 19),
    "amdf_memory_access_capabilities_t": ("AMDF_STRUCTURE_TYPE_MEMORY_ACCESS_CAPABILITIES", 20),
    "amdf_memory_profile_pair_query_t": ("AMDF_STRUCTURE_TYPE_MEMORY_PROFILE_PAIR_QUERY", 21),
    "amdf_gpu_endpoint_info_t": ("AMDF_STRUCTURE_TYPE_GPU_ENDPOINT_INFO", 0x00020001),
    "amdf_gpu_device_create_info_t": ("AMDF_STRUCTURE_TYPE_GPU_DEVICE_CREATE_INFO", 0x00020002),
    "amdf_gpu_device_info_t": ("AMDF_STRUCTURE_TYPE_GPU_DEVICE_INFO", 0x00020003),
    "amdf_gpu_kernel_queue_create_info_t": ("AMDF_STRUCTURE_TYPE_GPU_KERNEL_QUEUE_CREATE_INFO", 0x00020004),
    "amdf_gpu_kernel_queue_submission_info_t": ("AMDF_STRUCTURE_TYPE_GPU_KERNEL_QUEUE_SUBMISSION_INFO", 0x00020005),
    "amdf_gpu_user_queue_create_info_t": ("AMDF_STRUCTURE_TYPE_GPU_USER_QUEUE_CREATE_INFO", 0x00020007),
    "amdf_xdna_endpoint_info_t": ("AMDF_STRUCTURE_TYPE_XDNA_ENDPOINT_INFO", 0x00010001),
    "amdf_xdna_device_create_info_t": ("AMDF_STRUCTURE_TYPE_XDNA_DEVICE_CREATE_INFO", 0x00010002),
    "amdf_xdna_device_info_t": ("AMDF_STRUCTURE_TYPE_XDNA_DEVICE_INFO", 0x00010003),
    "amdf_xdna_kernel_queue_create_info_t": ("AMDF_STRUCTURE_TYPE_XDNA_KERNEL_QUEUE_CREATE_INFO", 0x00010008),
    "amdf_xdna_kernel_queue_submission_info_t": ("AMDF_STRUCTURE_TYPE_XDNA_KERNEL_QUEUE_SUBMISSION_INFO", 0x00010009),
    "amdf_xdna_context_create_info_t": ("AMDF_STRUCTURE_TYPE_XDNA_CONTEXT_CREATE_INFO", 0x0001000A),
    "amdf_xdna_context_info_t": ("AMDF_STRUCTURE_TYPE_XDNA_CONTEXT_INFO", 0x0001000B),
    "amdf_xdna_context_placement_info_t": ("AMDF_STRUCTURE_TYPE_XDNA_CONTEXT_PLACEMENT_INFO", 0x0001000D),
}

#: Other C constants the binding uses, by C name (checked against the ABI facts).
BINDING_CONSTANTS: dict[str, int] = {
    "AMDF_ABI_VERSION_5": 5,
    "AMDF_GPU_EXTENSION_VERSION_1": 1,
    "AMDF_XDNA_EXTENSION_VERSION_1": 1,
    "AMDF_ENDPOINT_NAME_CAPACITY": 128,
    "AMDF_XDNA_TARGET_ID_CAPACITY": 64,
    "AMDF_MEMORY_PROFILE_EXTERNAL_SUPPORT_CAPACITY": 5,
    "AMDF_MEMORY_PROFILE_ORDINAL_UNKNOWN": 0xFFFFFFFF,
    "AMDF_STATUS_OK": 0,
    "AMDF_NATIVE_LIFETIME_PROCESS": 0,
    "AMDF_MEMORY_SITE_KIND_DEVICE": 0,
    "AMDF_MEMORY_SITE_KIND_HOST": 1,
    "AMDF_MEMORY_PAIR_FLAG_SHARED_BACKING_REACHABLE": 1,
    "AMDF_EXTERNAL_MEMORY_SUPPORT_FLAG_IMPORT": 1,
    "AMDF_EXTERNAL_MEMORY_SUPPORT_FLAG_EXPORT": 2,
    "AMDF_NATIVE_EVENT_TYPE_BIT_EVENTFD": 2,
    "AMDF_QUEUE_PRODUCER_MODE_BIT_SINGLE": 2,
    "AMDF_QUEUE_PRODUCER_MODE_BIT_MULTI": 4,
}

# Header order: base.h, memory.h, native_event.h, queue.h, api.h, gpu.h, xdna.h.
CDEF = r"""
/* ---------------------------------------------------------------- base.h */
typedef uint32_t amdf_abi_version_t;
typedef uint64_t amdf_status_t;
typedef uint32_t amdf_status_domain_t;
typedef uint32_t amdf_status_code_t;
typedef uint32_t amdf_structure_type_t;
typedef uint32_t amdf_extension_id_t;

typedef struct amdf_input_structure_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
} amdf_input_structure_t;

typedef struct amdf_output_structure_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
} amdf_output_structure_t;

typedef struct amdf_instance_t amdf_instance_t;
typedef struct amdf_endpoint_t amdf_endpoint_t;
typedef struct amdf_device_t amdf_device_t;
typedef struct amdf_memory_scope_t amdf_memory_scope_t;
typedef struct amdf_memory_t amdf_memory_t;
typedef struct amdf_host_mapping_t amdf_host_mapping_t;
typedef struct amdf_user_queue_t amdf_user_queue_t;
typedef struct amdf_user_queue_mapping_t amdf_user_queue_mapping_t;
typedef struct amdf_kernel_queue_t amdf_kernel_queue_t;

typedef void* (*amdf_allocator_allocate_fn_t)(void* user_data, uint64_t byte_length, uint64_t minimum_alignment);
typedef void* (*amdf_allocator_resize_fn_t)(void* user_data, void* allocation, uint64_t old_byte_length,
                                            uint64_t new_byte_length, uint64_t minimum_alignment);
typedef void (*amdf_allocator_free_fn_t)(void* user_data, void* allocation);

typedef struct amdf_allocator_t {
  void* user_data;
  amdf_allocator_allocate_fn_t allocate;
  amdf_allocator_resize_fn_t resize;
  amdf_allocator_free_fn_t free;
} amdf_allocator_t;

typedef uint32_t amdf_native_lifetime_t;

typedef struct amdf_instance_create_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  amdf_native_lifetime_t native_lifetime;
  uint32_t reserved;
  amdf_allocator_t host_allocator;
} amdf_instance_create_info_t;

typedef struct amdf_endpoint_id_t {
  uint64_t words[2];
} amdf_endpoint_id_t;

typedef struct amdf_device_id_t {
  uint64_t words[2];
} amdf_device_id_t;

typedef struct amdf_queue_id_t {
  uint64_t words[2];
} amdf_queue_id_t;

typedef struct amdf_physical_memory_id_t {
  uint64_t words[2];
} amdf_physical_memory_id_t;

typedef uint32_t amdf_engine_kind_t;
typedef uint32_t amdf_endpoint_type_flags_t;

typedef struct amdf_pci_info_t {
  uint32_t vendor_id;
  uint32_t device_id;
  uint32_t subsystem_vendor_id;
  uint32_t subsystem_device_id;
  uint32_t revision_id;
} amdf_pci_info_t;

typedef uint32_t amdf_endpoint_native_identity_type_t;

typedef struct amdf_endpoint_native_identity_t {
  amdf_endpoint_native_identity_type_t type;
  union {
    struct {
      uint32_t major;
      uint32_t minor;
    } linux_device;
    struct {
      uint64_t luid;
      uint32_t physical_adapter_index;
    } windows_adapter;
  } value;
} amdf_endpoint_native_identity_t;

typedef struct amdf_endpoint_summary_t {
  amdf_endpoint_id_t id;
  amdf_engine_kind_t engine_kind;
  amdf_endpoint_type_flags_t type_flags;
  char name[128];
} amdf_endpoint_summary_t;

typedef struct amdf_endpoint_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_endpoint_id_t id;
  amdf_engine_kind_t engine_kind;
  amdf_endpoint_type_flags_t type_flags;
  amdf_pci_info_t pci;
  char name[128];
  uint32_t queue_family_count;
  amdf_endpoint_native_identity_t native_identity;
} amdf_endpoint_info_t;

/* -------------------------------------------------------------- memory.h */
typedef uint32_t amdf_memory_class_t;
typedef uint64_t amdf_memory_flags_t;
typedef uint32_t amdf_memory_access_t;
typedef uint32_t amdf_memory_address_kind_t;
typedef uint64_t amdf_memory_address_kinds_t;
typedef uint32_t amdf_memory_map_flags_t;
typedef uint64_t amdf_atomic_operations_t;
typedef uint32_t amdf_atomic_wait_conditions_t;

typedef struct amdf_atomic_capabilities_t {
  amdf_atomic_operations_t operations_32;
  amdf_atomic_operations_t operations_64;
  amdf_atomic_wait_conditions_t wait_conditions_32;
  amdf_atomic_wait_conditions_t wait_conditions_64;
  amdf_atomic_operations_t operations_without_dispatch_32;
  amdf_atomic_operations_t operations_without_dispatch_64;
} amdf_atomic_capabilities_t;

typedef uint32_t amdf_atomic_scope_t;

typedef struct amdf_atomic_reach_t {
  amdf_atomic_scope_t scope_32;
  amdf_atomic_scope_t scope_64;
} amdf_atomic_reach_t;

typedef uint32_t amdf_external_memory_type_t;

typedef struct amdf_external_memory_provenance_t {
  uint64_t words[2];
} amdf_external_memory_provenance_t;

typedef union amdf_external_memory_payload_t {
  int64_t file_descriptor;
  void* native_handle;
  void* host_pointer;
  uint64_t device_address;
} amdf_external_memory_payload_t;

typedef void (*amdf_external_memory_release_fn_t)(void* user_data, amdf_external_memory_type_t type,
                                                 amdf_external_memory_payload_t payload);

typedef struct amdf_external_memory_t {
  amdf_external_memory_type_t type;
  uint32_t reserved;
  amdf_external_memory_payload_t payload;
  amdf_external_memory_provenance_t provenance;
  uint64_t source_byte_offset;
  uint64_t byte_length;
  amdf_physical_memory_id_t physical_backing_id;
  amdf_external_memory_release_fn_t release;
  void* release_user_data;
} amdf_external_memory_t;

typedef uint64_t amdf_memory_profile_roles_t;
typedef uint32_t amdf_external_memory_support_flags_t;

typedef struct amdf_external_memory_support_t {
  amdf_external_memory_type_t type;
  amdf_external_memory_support_flags_t flags;
  amdf_external_memory_provenance_t provenance;
  uint64_t source_offset_alignment;
  uint64_t byte_length_alignment;
  uint64_t maximum_byte_length;
} amdf_external_memory_support_t;

typedef uint32_t amdf_host_cacheability_t;

typedef struct amdf_memory_construction_capabilities_t {
  uint64_t maximum_byte_length;
  uint64_t byte_length_granularity;
  uint64_t registered_host_pointer_alignment;
  amdf_host_cacheability_t registered_host_cacheability;
  uint32_t reserved;
  uint64_t minimum_alignment;
  uint64_t maximum_alignment;
  uint64_t native_byte_length_granularity;
} amdf_memory_construction_capabilities_t;

typedef struct amdf_memory_address_capabilities_t {
  uint32_t address_domain_ordinal;
  uint32_t address_bit_count;
  uint64_t minimum_address;
  uint64_t maximum_address;
  uint64_t minimum_alignment;
} amdf_memory_address_capabilities_t;

typedef struct amdf_memory_access_requirements_t {
  amdf_memory_access_t access;
  uint32_t reserved;
  amdf_memory_flags_t flags;
  amdf_memory_address_kinds_t address_kinds;
} amdf_memory_access_requirements_t;

typedef struct amdf_memory_device_access_t {
  amdf_device_t* device;
  amdf_memory_access_requirements_t requirements;
} amdf_memory_device_access_t;

typedef struct amdf_memory_access_capabilities_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_memory_access_t guaranteed_access;
  amdf_memory_access_t supported_access;
  amdf_memory_flags_t guaranteed_flags;
  amdf_memory_flags_t supported_flags;
  amdf_atomic_operations_t atomic_operations_32;
  amdf_atomic_operations_t atomic_operations_64;
  amdf_memory_address_capabilities_t device_address;
  amdf_memory_address_kinds_t address_kinds;
} amdf_memory_access_capabilities_t;

typedef struct amdf_host_mapping_capabilities_t {
  uint64_t maximum_byte_length;
  uint64_t byte_offset_granularity;
  uint64_t byte_length_granularity;
  amdf_memory_map_flags_t supported_access;
  uint32_t reserved;
} amdf_host_mapping_capabilities_t;

typedef struct amdf_memory_profile_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  uint32_t ordinal;
  amdf_memory_class_t memory_class;
  amdf_memory_profile_roles_t roles;
  amdf_memory_flags_t guaranteed_flags;
  amdf_memory_flags_t supported_flags;
  amdf_memory_construction_capabilities_t allocation;
  amdf_memory_construction_capabilities_t registration;
  amdf_memory_construction_capabilities_t import;
  amdf_host_mapping_capabilities_t host_mapping;
  uint32_t external_memory_support_count;
  uint32_t reserved;
  amdf_external_memory_support_t external_memory_support[5];
} amdf_memory_profile_t;

typedef uint32_t amdf_memory_scope_kind_t;

typedef struct amdf_memory_scope_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_memory_scope_kind_t kind;
  uint32_t memory_profile_count;
  amdf_endpoint_id_t physical_endpoint_id;
} amdf_memory_scope_info_t;

typedef struct amdf_memory_create_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  uint32_t memory_profile_ordinal;
  uint32_t access_count;
  amdf_memory_flags_t required_flags;
  uint64_t byte_length;
  uint64_t minimum_alignment;
  void* registered_host_pointer;
  const amdf_memory_device_access_t* accesses;
  amdf_host_cacheability_t registered_host_cacheability;
  uint32_t reserved;
} amdf_memory_create_info_t;

typedef struct amdf_memory_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  uint32_t memory_profile_ordinal;
  amdf_memory_class_t memory_class;
  uint32_t access_count;
  uint32_t reserved;
  amdf_memory_flags_t flags;
  uint64_t source_byte_offset;
  uint64_t byte_length;
  uint64_t alignment;
  uint64_t native_allocation_byte_length;
  uint64_t native_allocation_granularity;
  amdf_physical_memory_id_t physical_backing_id;
} amdf_memory_info_t;

typedef struct amdf_memory_access_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  uint32_t ordinal;
  amdf_memory_access_t access;
  amdf_device_id_t device_id;
  amdf_memory_flags_t flags;
  amdf_atomic_operations_t atomic_operations_32;
  amdf_atomic_operations_t atomic_operations_64;
  uint32_t address_domain_ordinal;
  uint32_t reserved;
  amdf_memory_address_kinds_t address_kinds;
  uint64_t reset_epoch;
} amdf_memory_access_info_t;

typedef struct amdf_memory_import_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  uint32_t memory_profile_ordinal;
  uint32_t access_count;
  amdf_memory_flags_t required_flags;
  uint64_t minimum_alignment;
  const amdf_memory_device_access_t* accesses;
} amdf_memory_import_info_t;

typedef struct amdf_memory_export_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  amdf_external_memory_type_t external_memory_type;
  uint32_t reserved;
  uint64_t byte_offset;
  uint64_t byte_length;
} amdf_memory_export_info_t;

typedef struct amdf_memory_map_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  uint64_t byte_offset;
  uint64_t byte_length;
  amdf_memory_map_flags_t flags;
} amdf_memory_map_info_t;

typedef uint32_t amdf_host_cache_operation_t;
typedef uint32_t amdf_cache_operation_t;
typedef uint64_t amdf_cache_operations_t;
typedef uint32_t amdf_cache_transition_kind_t;
typedef uint32_t amdf_cache_transition_kinds_t;
typedef uint32_t amdf_cache_transition_executor_t;
typedef uint32_t amdf_host_cache_instruction_t;
typedef uint32_t amdf_host_cache_fence_t;

typedef struct amdf_cache_transition_t {
  amdf_cache_transition_kind_t kind;
  amdf_cache_transition_executor_t executor;
  amdf_cache_operation_t operation;
  amdf_host_cache_operation_t host_operation;
  amdf_host_cache_instruction_t host_instruction;
  amdf_host_cache_fence_t host_fence_before;
  amdf_host_cache_fence_t host_fence_after;
  uint64_t range_granularity;
} amdf_cache_transition_t;

typedef struct amdf_host_mapping_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_memory_map_flags_t flags;
  amdf_host_cacheability_t cacheability;
  void* pointer;
  uint64_t memory_byte_offset;
  uint64_t byte_length;
  uint64_t byte_offset_granularity;
  uint64_t byte_length_granularity;
  uint32_t cache_line_size;
  uint32_t reserved;
  amdf_cache_transition_t flush;
  amdf_cache_transition_t invalidate;
} amdf_host_mapping_info_t;

typedef uint32_t amdf_memory_site_kind_t;

typedef struct amdf_memory_site_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  amdf_memory_site_kind_t kind;
  uint32_t reserved;
  union {
    struct {
      amdf_memory_t* memory;
      uint32_t access_ordinal;
      uint32_t queue_family_ordinal;
    } device;
    amdf_host_mapping_t* host_mapping;
  } value;
} amdf_memory_site_t;

typedef struct amdf_memory_profile_site_t {
  amdf_memory_site_kind_t kind;
  uint32_t reserved;
  union {
    struct {
      uint32_t access_ordinal;
      uint32_t queue_family_ordinal;
    } device;
    amdf_memory_map_flags_t host_access;
  } value;
} amdf_memory_profile_site_t;

typedef struct amdf_memory_profile_pair_query_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  uint32_t memory_profile_ordinal;
  uint32_t access_count;
  amdf_memory_flags_t required_flags;
  const amdf_memory_device_access_t* accesses;
  amdf_host_cacheability_t registered_host_cacheability;
  uint32_t reserved;
  amdf_external_memory_type_t external_memory_type;
  uint32_t external_memory_reserved;
  amdf_external_memory_provenance_t external_memory_provenance;
  amdf_memory_profile_site_t producer;
  amdf_memory_profile_site_t consumer;
} amdf_memory_profile_pair_query_t;

typedef uint64_t amdf_memory_pair_flags_t;

typedef struct amdf_memory_pair_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_memory_pair_flags_t flags;
  amdf_cache_transition_t release;
  amdf_cache_transition_t acquire;
  amdf_atomic_reach_t atomic_reach;
  uint64_t estimated_fixed_cost_nanoseconds;
} amdf_memory_pair_info_t;

/* -------------------------------------------------------- native_event.h */
typedef uint32_t amdf_native_event_type_t;
typedef uint64_t amdf_native_event_types_t;

typedef union amdf_native_event_payload_t {
  int64_t file_descriptor;
  void* native_handle;
} amdf_native_event_payload_t;

typedef struct amdf_native_event_t {
  amdf_native_event_type_t type;
  uint32_t reserved;
  amdf_native_event_payload_t payload;
} amdf_native_event_t;

/* --------------------------------------------------------------- queue.h */
typedef uint32_t amdf_queue_command_type_t;
typedef uint64_t amdf_queue_format_features_t;
typedef uint32_t amdf_queue_publication_modes_t;
typedef uint64_t amdf_queue_roles_t;
typedef uint32_t amdf_queue_producer_mode_t;
typedef uint32_t amdf_queue_producer_modes_t;
typedef uint32_t amdf_queue_priority_t;
typedef uint32_t amdf_queue_priority_capabilities_t;
typedef uint64_t amdf_user_queue_capabilities_t;
typedef uint64_t amdf_kernel_queue_capabilities_t;

typedef struct amdf_queue_metadata_format_t {
  amdf_queue_command_type_t command_type;
  uint32_t dispatch_version;
  uint32_t barrier_version;
  uint32_t reserved;
} amdf_queue_metadata_format_t;

typedef struct amdf_queue_family_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  uint32_t ordinal;
  amdf_queue_command_type_t command_type;
  amdf_queue_publication_modes_t publication_modes;
  uint32_t format_version;
  amdf_queue_format_features_t format_features;
  amdf_queue_roles_t roles;
  amdf_cache_operations_t cache_operations;
  amdf_cache_transition_kinds_t cache_transition_kinds;
  uint32_t reserved;
  amdf_atomic_capabilities_t atomic_capabilities;
  amdf_user_queue_capabilities_t user_queue_capabilities;
  amdf_kernel_queue_capabilities_t kernel_queue_capabilities;
  amdf_queue_producer_modes_t producer_modes;
  amdf_queue_priority_capabilities_t priority_capabilities;
  amdf_queue_metadata_format_t metadata;
  uint64_t minimum_ring_byte_length;
  uint64_t maximum_ring_byte_length;
  uint64_t ring_byte_length_alignment;
} amdf_queue_family_info_t;

typedef uint32_t amdf_queue_state_t;

typedef struct amdf_user_queue_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_device_id_t device_id;
  amdf_queue_id_t queue_id;
  uint64_t reset_epoch;
  uint32_t queue_family_ordinal;
  amdf_queue_command_type_t command_type;
  uint32_t format_version;
  amdf_queue_format_features_t format_features;
  amdf_queue_producer_mode_t producer_mode;
  amdf_queue_priority_t priority;
  amdf_user_queue_capabilities_t capabilities;
  amdf_queue_roles_t roles;
  amdf_queue_metadata_format_t metadata;
  uint64_t ring_byte_length;
  uint64_t metadata_ring_byte_length;
} amdf_user_queue_info_t;

typedef struct amdf_user_queue_mapping_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_device_id_t producer_device_id;
  amdf_queue_id_t queue_id;
  uint64_t queue_reset_epoch;
  uint64_t producer_reset_epoch;
  amdf_queue_command_type_t command_type;
  uint32_t format_version;
  amdf_queue_format_features_t format_features;
  uint64_t ring_address;
  uint64_t ring_byte_length;
  uint64_t read_index_address;
  uint64_t write_index_address;
  uint64_t doorbell_address;
  uint32_t index_bits;
  uint32_t doorbell_bits;
  amdf_queue_metadata_format_t metadata;
  uint64_t metadata_ring_address;
  uint64_t metadata_ring_byte_length;
} amdf_user_queue_mapping_info_t;

typedef struct amdf_user_queue_status_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_queue_state_t state;
  uint32_t reserved;
  uint64_t reset_epoch;
  uint64_t producer_index;
  uint64_t consumed_index;
  amdf_status_t terminal_status;
} amdf_user_queue_status_t;

typedef struct amdf_kernel_queue_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_device_id_t device_id;
  uint64_t reset_epoch;
  uint32_t queue_family_ordinal;
  amdf_queue_command_type_t command_type;
  uint32_t maximum_pending_submission_count;
  uint32_t maximum_command_count;
  amdf_native_event_types_t notification_types;
} amdf_kernel_queue_info_t;

typedef struct amdf_kernel_queue_status_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  uint64_t retired_submission;
  amdf_queue_state_t state;
  uint32_t reserved;
  amdf_status_t terminal_status;
} amdf_kernel_queue_status_t;

/* ----------------------------------------------------------------- api.h */
typedef struct amdf_api_t {
  uint32_t structure_size;
  amdf_abi_version_t abi_version;
  amdf_status_t (*instance_create)(const amdf_instance_create_info_t* create_info, amdf_instance_t** out_instance);
  amdf_status_t (*instance_destroy)(amdf_instance_t* instance);
  amdf_status_t (*endpoint_enumerate)(amdf_instance_t* instance, uint32_t capacity,
                                      amdf_endpoint_summary_t* summaries, uint32_t* out_count);
  amdf_status_t (*endpoint_open)(amdf_instance_t* instance, const amdf_endpoint_id_t* id,
                                 amdf_endpoint_t** out_endpoint);
  amdf_status_t (*endpoint_query_info)(amdf_endpoint_t* endpoint, amdf_endpoint_info_t* out_info);
  amdf_status_t (*endpoint_close)(amdf_endpoint_t* endpoint);
  amdf_status_t (*query_extension)(amdf_extension_id_t extension_id, uint32_t minimum_version,
                                   uint32_t maximum_version, const void** out_extension_api);
  amdf_status_t (*endpoint_query_queue_family_info)(amdf_endpoint_t* endpoint, uint32_t queue_family_ordinal,
                                                    amdf_queue_family_info_t* out_info);
  amdf_status_t (*device_destroy)(amdf_device_t* device);
  amdf_status_t (*instance_enumerate_memory_scopes)(amdf_instance_t* instance, uint32_t capacity,
                                                    amdf_memory_scope_t** scopes, uint32_t* out_count);
  amdf_status_t (*device_enumerate_memory_scopes)(amdf_device_t* device, uint32_t capacity,
                                                  amdf_memory_scope_t** scopes, uint32_t* out_count);
  amdf_status_t (*memory_scope_query_info)(amdf_memory_scope_t* scope, amdf_memory_scope_info_t* out_info);
  amdf_status_t (*memory_scope_query_device_profile)(amdf_memory_scope_t* scope, uint32_t profile_ordinal,
                                                     uint32_t access_count,
                                                     const amdf_memory_device_access_t* accesses,
                                                     amdf_memory_profile_t* out_profile,
                                                     amdf_memory_access_capabilities_t* out_access_capabilities);
  amdf_status_t (*memory_create)(amdf_memory_scope_t* scope, const amdf_memory_create_info_t* create_info,
                                 amdf_memory_t** out_memory);
  amdf_status_t (*memory_import)(amdf_memory_scope_t* scope, const amdf_memory_import_info_t* import_info,
                                 amdf_external_memory_t* inout_external_memory, amdf_memory_t** out_memory);
  amdf_status_t (*memory_query_info)(amdf_memory_t* memory, amdf_memory_info_t* out_info);
  amdf_status_t (*memory_query_access_info)(amdf_memory_t* memory, uint32_t access_ordinal,
                                            amdf_memory_access_info_t* out_info);
  amdf_status_t (*memory_export)(amdf_memory_t* memory, const amdf_memory_export_info_t* export_info,
                                 amdf_external_memory_t* out_value);
  void (*external_memory_release)(amdf_external_memory_t* value);
  amdf_status_t (*memory_query_pair_info)(const amdf_memory_site_t* producer_site,
                                          const amdf_memory_site_t* consumer_site,
                                          amdf_memory_pair_info_t* out_info);
  amdf_status_t (*memory_map)(amdf_memory_t* memory, const amdf_memory_map_info_t* map_info,
                              amdf_host_mapping_t** out_mapping);
  amdf_status_t (*host_mapping_query_info)(amdf_host_mapping_t* mapping, amdf_host_mapping_info_t* out_info);
  amdf_status_t (*host_mapping_cache_control)(amdf_host_mapping_t* mapping, amdf_host_cache_operation_t operation,
                                              uint64_t byte_offset, uint64_t byte_length);
  amdf_status_t (*host_mapping_destroy)(amdf_host_mapping_t* mapping);
  amdf_status_t (*memory_destroy)(amdf_memory_t* memory);
  amdf_status_t (*kernel_queue_query_info)(amdf_kernel_queue_t* queue, amdf_kernel_queue_info_t* out_info);
  amdf_status_t (*kernel_queue_query_status)(amdf_kernel_queue_t* queue, amdf_kernel_queue_status_t* out_status);
  amdf_status_t (*kernel_queue_wait)(amdf_kernel_queue_t* queue, uint64_t submission,
                                     uint64_t timeout_nanoseconds, uint64_t poll_duration_nanoseconds);
  amdf_status_t (*kernel_queue_destroy)(amdf_kernel_queue_t* queue);
  amdf_status_t (*user_queue_query_info)(amdf_user_queue_t* queue, amdf_user_queue_info_t* out_info);
  amdf_status_t (*user_queue_map)(amdf_user_queue_t* queue, amdf_device_t* producer_device,
                                  amdf_user_queue_mapping_t** out_mapping);
  amdf_status_t (*user_queue_mapping_query_info)(amdf_user_queue_mapping_t* mapping,
                                                 amdf_user_queue_mapping_info_t* out_info);
  amdf_status_t (*user_queue_mapping_destroy)(amdf_user_queue_mapping_t* mapping);
  amdf_status_t (*user_queue_query_status)(amdf_user_queue_t* queue, amdf_user_queue_status_t* out_status);
  amdf_status_t (*user_queue_wait_consumed)(amdf_user_queue_t* queue, uint64_t published_index,
                                            uint64_t timeout_nanoseconds, uint64_t poll_duration_nanoseconds);
  amdf_status_t (*user_queue_destroy)(amdf_user_queue_t* queue);
  amdf_status_t (*memory_query_address)(amdf_memory_t* memory, uint32_t access_ordinal,
                                        amdf_memory_address_kind_t kind, uint64_t* out_address);
  amdf_status_t (*memory_scope_query_pair_info)(amdf_memory_scope_t* scope,
                                                const amdf_memory_profile_pair_query_t* query,
                                                amdf_memory_pair_info_t* out_info);
  amdf_status_t (*kernel_queue_refresh_status)(amdf_kernel_queue_t* queue, amdf_kernel_queue_status_t* out_status);
  amdf_status_t (*kernel_queue_request_notification)(amdf_kernel_queue_t* queue, uint64_t submission,
                                                     const amdf_native_event_t* event);
} amdf_api_t;

typedef amdf_status_t (*amdf_query_api_fn_t)(amdf_abi_version_t minimum_version, amdf_abi_version_t maximum_version,
                                             const amdf_api_t** out_api);

amdf_status_t amdf_query_api(amdf_abi_version_t minimum_version, amdf_abi_version_t maximum_version,
                             const amdf_api_t** out_api);

/* ----------------------------------------------------------------- gpu.h */
typedef uint64_t amdf_gpu_device_features_t;

typedef struct amdf_gpu_endpoint_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  struct {
    uint32_t major;
    uint32_t minor;
    uint32_t stepping;
  } gfx_ip;
  uint32_t asic_revision;
  struct {
    uint32_t wavefront_size;
    uint32_t compute_unit_count;
    uint32_t maximum_wave_count_per_compute_unit;
    uint32_t maximum_scratch_wave_count_per_compute_unit;
    uint64_t local_data_share_byte_length;
  } compute;
  struct {
    uint32_t xcc_count;
    uint32_t shader_engine_count_per_xcc;
  } topology;
} amdf_gpu_endpoint_info_t;

typedef struct amdf_gpu_device_create_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  uint64_t reserved;
} amdf_gpu_device_create_info_t;

typedef struct amdf_gpu_device_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_device_id_t id;
  uint64_t reset_epoch;
  amdf_gpu_device_features_t features;
} amdf_gpu_device_info_t;

typedef struct amdf_gpu_queue_scratch_t {
  amdf_memory_t* memory;
  uint32_t access_ordinal;
  uint32_t reserved;
  uint64_t byte_offset;
  uint64_t byte_length;
  uint32_t maximum_private_segment_byte_length;
  uint32_t maximum_wave_count;
} amdf_gpu_queue_scratch_t;

typedef struct amdf_gpu_user_queue_create_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  uint32_t queue_family_ordinal;
  amdf_queue_priority_t priority;
  amdf_queue_producer_mode_t producer_mode;
  uint32_t reserved;
  amdf_user_queue_capabilities_t required_capabilities;
  uint64_t ring_byte_length;
  amdf_gpu_queue_scratch_t scratch;
} amdf_gpu_user_queue_create_info_t;

typedef struct amdf_gpu_kernel_command_t {
  amdf_memory_t* memory;
  uint32_t access_ordinal;
  uint32_t reserved;
  uint64_t byte_offset;
  uint64_t byte_length;
} amdf_gpu_kernel_command_t;

typedef struct amdf_gpu_kernel_queue_create_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  uint32_t queue_family_ordinal;
  uint32_t maximum_pending_submission_count;
} amdf_gpu_kernel_queue_create_info_t;

typedef struct amdf_gpu_kernel_queue_submission_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  uint32_t command_count;
  uint32_t reserved;
  const amdf_gpu_kernel_command_t* commands;
} amdf_gpu_kernel_queue_submission_info_t;

typedef struct amdf_gpu_api_t {
  uint32_t structure_size;
  uint32_t extension_version;
  amdf_status_t (*endpoint_query_info)(amdf_endpoint_t* endpoint, amdf_gpu_endpoint_info_t* out_info);
  amdf_status_t (*device_create)(amdf_endpoint_t* endpoint, const amdf_gpu_device_create_info_t* create_info,
                                 amdf_device_t** out_device);
  amdf_status_t (*device_query_info)(amdf_device_t* device, amdf_gpu_device_info_t* out_info);
  amdf_status_t (*kernel_queue_create)(amdf_device_t* device, const amdf_gpu_kernel_queue_create_info_t* create_info,
                                       amdf_kernel_queue_t** out_queue);
  amdf_status_t (*kernel_queue_submit)(amdf_kernel_queue_t* queue,
                                       const amdf_gpu_kernel_queue_submission_info_t* submission_info,
                                       uint64_t* out_submission);
  amdf_status_t (*user_queue_create)(amdf_device_t* device, const amdf_gpu_user_queue_create_info_t* create_info,
                                     amdf_user_queue_t** out_queue);
} amdf_gpu_api_t;

/* ---------------------------------------------------------------- xdna.h */
typedef struct amdf_xdna_context_t amdf_xdna_context_t;

typedef uint32_t amdf_xdna_architecture_t;
typedef uint32_t amdf_xdna_scheduling_modes_t;
typedef uint32_t amdf_xdna_placement_modes_t;
typedef uint32_t amdf_xdna_binary_format_t;

typedef struct amdf_xdna_binary_format_info_t {
  amdf_xdna_binary_format_t format;
  uint32_t version;
} amdf_xdna_binary_format_info_t;

typedef struct amdf_xdna_endpoint_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_xdna_architecture_t architecture;
  char target_id[64];
} amdf_xdna_endpoint_info_t;

typedef struct amdf_xdna_context_id_t {
  uint64_t words[2];
} amdf_xdna_context_id_t;

typedef struct amdf_xdna_device_create_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
} amdf_xdna_device_create_info_t;

typedef struct amdf_xdna_device_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_device_id_t id;
  uint64_t reset_epoch;
  amdf_xdna_placement_modes_t placement_modes;
  struct {
    uint32_t column_origin;
    uint32_t column_count;
    uint32_t row_count;
    uint64_t column_stride;
  } array;
  struct {
    amdf_xdna_scheduling_modes_t scheduling_modes;
    uint32_t minimum_column_count;
    uint32_t maximum_column_count;
    uint32_t column_count_granularity;
  } context;
  struct {
    uint64_t maximum_byte_length;
    uint32_t address_alignment;
    uint32_t byte_length_granularity;
    amdf_xdna_binary_format_info_t format;
  } instruction;
} amdf_xdna_device_info_t;

typedef struct amdf_xdna_context_create_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  uint32_t logical_column_count;
  uint32_t physical_column_origin;
  amdf_xdna_scheduling_modes_t acceptable_scheduling_modes;
} amdf_xdna_context_create_info_t;

typedef struct amdf_xdna_context_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  amdf_xdna_context_id_t id;
  amdf_device_id_t device_id;
  uint64_t reset_epoch;
  amdf_xdna_scheduling_modes_t scheduling_mode;
  uint32_t logical_column_count;
  uint32_t row_count;
} amdf_xdna_context_info_t;

typedef struct amdf_xdna_context_placement_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  void* next;
  uint32_t column_origin;
  uint32_t column_count;
} amdf_xdna_context_placement_info_t;

typedef struct amdf_xdna_kernel_queue_create_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  uint32_t queue_family_ordinal;
  uint32_t maximum_pending_submission_count;
} amdf_xdna_kernel_queue_create_info_t;

typedef struct amdf_xdna_kernel_command_t {
  amdf_memory_t* memory;
  uint32_t access_ordinal;
  uint32_t reserved;
  uint64_t byte_offset;
  uint64_t byte_length;
} amdf_xdna_kernel_command_t;

typedef struct amdf_xdna_kernel_queue_submission_info_t {
  amdf_structure_type_t type;
  uint32_t structure_size;
  const void* next;
  uint32_t command_count;
  uint32_t reserved;
  const amdf_xdna_kernel_command_t* commands;
} amdf_xdna_kernel_queue_submission_info_t;

typedef struct amdf_xdna_api_t {
  uint32_t structure_size;
  uint32_t extension_version;
  amdf_status_t (*endpoint_query_info)(amdf_endpoint_t* endpoint, amdf_xdna_endpoint_info_t* out_info);
  amdf_status_t (*device_create)(amdf_endpoint_t* endpoint, const amdf_xdna_device_create_info_t* create_info,
                                 amdf_device_t** out_device);
  amdf_status_t (*device_query_info)(amdf_device_t* device, amdf_xdna_device_info_t* out_info);
  amdf_status_t (*kernel_queue_create)(amdf_xdna_context_t* context,
                                       const amdf_xdna_kernel_queue_create_info_t* create_info,
                                       amdf_kernel_queue_t** out_queue);
  amdf_status_t (*kernel_queue_submit)(amdf_kernel_queue_t* queue,
                                       const amdf_xdna_kernel_queue_submission_info_t* submission_info,
                                       uint64_t* out_submission);
  amdf_status_t (*context_create)(amdf_device_t* device, const amdf_xdna_context_create_info_t* create_info,
                                  amdf_xdna_context_t** out_context);
  amdf_status_t (*context_query_info)(amdf_xdna_context_t* context, amdf_xdna_context_info_t* out_info);
  amdf_status_t (*context_query_placement_info)(amdf_xdna_context_t* context,
                                                amdf_xdna_context_placement_info_t* out_info);
  amdf_status_t (*context_enumerate_memory_scopes)(amdf_xdna_context_t* context, uint32_t capacity,
                                                   amdf_memory_scope_t** scopes, uint32_t* out_count);
  amdf_status_t (*context_destroy)(amdf_xdna_context_t* context);
} amdf_xdna_api_t;
"""


def make_ffi(cdef: str = CDEF) -> cffi.FFI:
    """A new FFI holding ``cdef`` (the binding uses :data:`ffi`; tests build others)."""
    made = cffi.FFI()
    made.cdef(cdef)
    return made


#: The FFI every part of the binding shares.
ffi = make_ffi()


def load_abi_facts(path: str | Path | None = None) -> dict[str, Any]:
    """The ABI facts file (the shipped copy unless ``path`` is given)."""
    with open(ABI_FACTS_PATH if path is None else path, encoding="utf-8") as handle:
        return json.load(handle)


def _is_anonymous(ctype: Any) -> bool:
    return ctype.kind in ("struct", "union") and "$" in ctype.cname


def _walk_fields(of: cffi.FFI, ctype: Any, prefix: str, base: int, out: dict[str, list[int]]) -> None:
    for field, info in ctype.fields or []:
        path = prefix + field
        out[path] = [base + info.offset, of.sizeof(info.type)]
        if _is_anonymous(info.type):
            _walk_fields(of, info.type, path + ".", base + info.offset, out)


def struct_layout(of: cffi.FFI, name: str) -> dict[str, Any]:
    """What cffi computes for the declared struct or union ``name``: size, alignment,
    the top-level field order, and every field as ``path: [offset, size]`` in
    declaration order, descending into anonymous nested structs and unions
    (``"compute.wavefront_size"``, offsets from the start of ``name``)."""
    ctype = of.typeof(name)
    fields: dict[str, list[int]] = {}
    _walk_fields(of, ctype, "", 0, fields)
    return {
        "size": of.sizeof(ctype),
        "align": of.alignof(ctype),
        "fields": fields,
        "order": [field for field, _ in ctype.fields or []],
    }


def layout_mismatches(of: cffi.FFI | None = None, facts: Mapping[str, Any] | None = None) -> list[str]:
    """Every difference between the declarations in ``of`` (default: the binding's) and
    the ABI facts (default: the shipped file), one line each; empty when they agree.

    Checks each struct of the facts: declared at all, size, alignment, field order,
    each field's offset and size; and that each opaque handle type is declared and
    incomplete."""
    of = ffi if of is None else of
    facts = load_abi_facts() if facts is None else facts
    problems: list[str] = []
    for name, expected in facts["structs"].items():
        try:
            got = struct_layout(of, name)
        except (cffi.FFIError, cffi.CDefError, TypeError, KeyError) as exc:
            problems.append(f"{name}: not declared ({exc})")
            continue
        for key in ("size", "align"):
            if got[key] != expected[key]:
                problems.append(f"{name}: {key} {got[key]} != {expected[key]}")
        if got["order"] != list(expected["order"]):
            problems.append(f"{name}: field order {got['order']} != {expected['order']}")
        elif list(got["fields"]) != list(expected["fields"]):
            problems.append(f"{name}: nested field order {list(got['fields'])} != {list(expected['fields'])}")
        for field, (offset, size) in expected["fields"].items():
            have = got["fields"].get(field)
            if have is None:
                problems.append(f"{name}.{field}: not declared")
            elif have != [offset, size]:
                problems.append(f"{name}.{field}: offset/size {have[0]}/{have[1]} != {offset}/{size}")
    for name in facts.get("opaque", []):
        try:
            ctype = of.typeof(name)
        except (cffi.FFIError, cffi.CDefError, TypeError, KeyError) as exc:
            problems.append(f"{name}: opaque handle not declared ({exc})")
            continue
        try:
            of.sizeof(ctype)
        except (cffi.FFIError, ValueError):
            continue
        problems.append(f"{name}: declared with a layout, but libamdf keeps it opaque")
    return problems


def constant_mismatches(facts: Mapping[str, Any] | None = None) -> list[str]:
    """Differences between the binding's C constants (structure types and
    :data:`BINDING_CONSTANTS`) and the ABI facts' enums and #defines."""
    facts = load_abi_facts() if facts is None else facts
    known = {**facts["enums"], **facts["defines"]}
    problems: list[str] = []
    wanted = {cname: value for cname, value in STRUCTURE_TYPES.values()} | BINDING_CONSTANTS
    for cname, value in wanted.items():
        if cname not in known:
            problems.append(f"{cname}: not in the ABI facts")
        elif known[cname] != value:
            problems.append(f"{cname}: binding uses {value}, headers say {known[cname]}")
    return problems


__all__ = [
    "ABI_VERSION",
    "HEADER_REPOSITORY",
    "HEADER_COMMITS",
    "ABI_FACTS_PATH",
    "STRUCTURE_TYPES",
    "BINDING_CONSTANTS",
    "CDEF",
    "ffi",
    "make_ffi",
    "load_abi_facts",
    "struct_layout",
    "layout_mismatches",
    "constant_mismatches",
]
