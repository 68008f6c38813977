# What `cmake --install` puts besides the binaries (the axonn executable and the SPANK plugin
# install themselves from their folders), under <prefix>/share/axonn:
#   job_templates/   the sbatch templates (single-node, multi-node, preemptible, elastic) and the
#                    job TOMLs they and users start from
#   site_configs/    one TOML per site; example.toml documents every key
#   plugstack.conf.example (from plugins/, when the plugin is built)
include(GNUInstallDirs)
# The *.sbatch templates stay executable (sbatch does not need it; running one by hand to see
# its usage errors does).
install(DIRECTORY ${PROJECT_SOURCE_DIR}/job_templates/ DESTINATION ${CMAKE_INSTALL_DATADIR}/axonn/job_templates
        PATTERN "*.sbatch"
        PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/site_configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/axonn/site_configs)
