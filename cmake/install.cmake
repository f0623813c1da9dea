# The library installed (`cmake --install build --prefix DIR`): headers in include/sluice, static
# libraries, a CMake package (find_package(sluice CONFIG): sluice::sluice, sluice::redis with
# COMPONENTS redis, sluice::memcached with COMPONENTS memcached) and pkg-config files (sluice.pc,
# sluice-redis.pc, sluice-memcached.pc). docs/library.md shows both
# from a separate project; tests/install builds one against an install tree.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(SLUICE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/sluice)
set(SLUICE_PKGCONFIG_DIR ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

# sluice::sluice: the contract, the algorithms, Limiter, DirectLimiter and the memory store, as
# one target.
# (The name `sluice` is the CLI's, hence sluice_library here.)
add_library(sluice_library INTERFACE)
target_link_libraries(sluice_library INTERFACE sluice_core sluice_memory)
set_target_properties(sluice_library PROPERTIES EXPORT_NAME sluice)
set_target_properties(sluice_core PROPERTIES EXPORT_NAME core)
set_target_properties(sluice_memory PROPERTIES EXPORT_NAME memory)

set(SLUICE_PUBLIC_HEADERS algorithms.h clock.h decision.h direct_limiter.h duration.h
    convert.h failure_policy.h give_back.h limit.h limiter.h memory_store.h settle.h store.h
    store_log.h)
list(TRANSFORM SLUICE_PUBLIC_HEADERS PREPEND ${PROJECT_SOURCE_DIR}/include/sluice/)
install(FILES ${SLUICE_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sluice
        COMPONENT library)
install(TARGETS sluice_core sluice_memory sluice_library EXPORT sluiceTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT sluiceTargets NAMESPACE sluice:: DESTINATION ${SLUICE_CMAKE_DIR}
        COMPONENT library)

# The Redis store, a component of its own: its users need hiredis and OpenSSL too.
if(SLUICE_REDIS)
  set_target_properties(sluice_redis PROPERTIES EXPORT_NAME redis)
  set_target_properties(sluice_tls PROPERTIES EXPORT_NAME tls)
  install(FILES ${PROJECT_SOURCE_DIR}/include/sluice/redis_store.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sluice COMPONENT library)
  install(TARGETS sluice_redis sluice_tls EXPORT sluiceRedisTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library)
  install(EXPORT sluiceRedisTargets NAMESPACE sluice:: DESTINATION ${SLUICE_CMAKE_DIR}
          COMPONENT library)
endif()

# The Memcached store, a component of its own: its users need libmemcached and OpenSSL too.
if(SLUICE_MEMCACHED)
  set_target_properties(sluice_memcached PROPERTIES EXPORT_NAME memcached)
  install(FILES ${PROJECT_SOURCE_DIR}/include/sluice/memcached_store.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/sluice COMPONENT library)
  install(TARGETS sluice_memcached EXPORT sluiceMemcachedTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT library)
  install(EXPORT sluiceMemcachedTargets NAMESPACE sluice:: DESTINATION ${SLUICE_CMAKE_DIR}
          COMPONENT library)
endif()

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/sluiceConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/sluiceConfig.cmake
                              INSTALL_DESTINATION ${SLUICE_CMAKE_DIR})
# 0.x: a minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/sluiceConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/sluiceConfig.cmake ${PROJECT_BINARY_DIR}/sluiceConfigVersion.cmake
        DESTINATION ${SLUICE_CMAKE_DIR} COMPONENT library)

# pkg-config: the prefix is found from the .pc file's own place (${pcfiledir}), so that
# `cmake --install --prefix` anywhere gives files that point to themselves.
if(IS_ABSOLUTE "${SLUICE_PKGCONFIG_DIR}")
  set(SLUICE_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH SLUICE_PC_UP /prefix/${SLUICE_PKGCONFIG_DIR} /prefix)
  string(REGEX REPLACE "/$" "" SLUICE_PC_UP "${SLUICE_PC_UP}")
  set(SLUICE_PC_PREFIX "\${pcfiledir}/${SLUICE_PC_UP}")
endif()
set(SLUICE_PC_LIBDIR ${CMAKE_INSTALL_LIBDIR})
set(SLUICE_PC_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR})
foreach(dir LIBDIR INCLUDEDIR)
  if(NOT IS_ABSOLUTE "${SLUICE_PC_${dir}}")
    set(SLUICE_PC_${dir} "\${prefix}/${SLUICE_PC_${dir}}")
  endif()
endforeach()
configure_file(${CMAKE_CURRENT_LIST_DIR}/sluice.pc.in ${PROJECT_BINARY_DIR}/sluice.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/sluice.pc DESTINATION ${SLUICE_PKGCONFIG_DIR}
        COMPONENT library)
if(SLUICE_REDIS)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/sluice-redis.pc.in ${PROJECT_BINARY_DIR}/sluice-redis.pc
                 @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/sluice-redis.pc DESTINATION ${SLUICE_PKGCONFIG_DIR}
          COMPONENT library)
endif()
if(SLUICE_MEMCACHED)
  configure_file(${CMAKE_CURRENT_LIST_DIR}/sluice-memcached.pc.in
                 ${PROJECT_BINARY_DIR}/sluice-memcached.pc @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/sluice-memcached.pc DESTINATION ${SLUICE_PKGCONFIG_DIR}
          COMPONENT library)
endif()
