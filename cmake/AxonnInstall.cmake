# What `cmake --install` puts besides the binaries (the axonn executable and the SPANK plugin
# install themselves from their folders), under <prefix>/share/axonn:
#   job_templates/   the sbatch templates and job TOMLs users start from
#   site_configs/    one TOML per site; example.toml documents every key
#   plugstack.conf.example (from plugins/, when the plugin is built)
include(GNUInstallDirs)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/job_templates/ DESTINATION ${CMAKE_INSTALL_DATADIR}/axonn/job_templates)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/site_configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/axonn/site_configs)
