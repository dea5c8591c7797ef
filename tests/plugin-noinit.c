/* A shared library that is not a placesim plug-in (no psim_plugin_init): loading it must be a
 * clear error. */
int psim_plugin_example_not_init(void);
int psim_plugin_example_not_init(void)
{
    return 42;
}
