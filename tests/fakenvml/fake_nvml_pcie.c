/*
 * The fake NVML's PCIe queries, included at the end of fake_nvml.c (its helpers and
 * device table are that file's). The link's current generation and width follow the
 * device's "pcie_gen" and "pcie_width" series (default: the maximum, "dev I pcie_max
 * GEN WIDTH", Gen5 x16); the throughput its "pcie_tx_kb_s" and "pcie_rx_kb_s" series
 * (KB/s, default 0), as nvmlDeviceGetPcieThroughput reports them.
 */

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(void *h, unsigned int *gen) {
    ENTER_DEV("nvmlDeviceGetMaxPcieLinkGeneration", h, d);
    if (!gen)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *gen = d->pcie_gen_max;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(void *h, unsigned int *width) {
    ENTER_DEV("nvmlDeviceGetMaxPcieLinkWidth", h, d);
    if (!width)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *width = d->pcie_width_max;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(void *h, unsigned int *gen) {
    ENTER_DEV("nvmlDeviceGetCurrPcieLinkGeneration", h, d);
    if (!gen)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *gen = (unsigned)value(d, S_PCIE_GEN, d->pcie_gen_max);
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(void *h, unsigned int *width) {
    ENTER_DEV("nvmlDeviceGetCurrPcieLinkWidth", h, d);
    if (!width)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *width = (unsigned)value(d, S_PCIE_WIDTH, d->pcie_width_max);
    RETURN(NVML_SUCCESS);
}

/* counter: NVML_PCIE_UTIL_TX_BYTES 0, NVML_PCIE_UTIL_RX_BYTES 1; KB/s. */
nvmlReturn_t nvmlDeviceGetPcieThroughput(void *h, unsigned int counter, unsigned int *value_kbps) {
    ENTER_DEV("nvmlDeviceGetPcieThroughput", h, d);
    if (!value_kbps || counter > 1)
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    *value_kbps = (unsigned)value(d, counter == 0 ? S_PCIE_TX_KB_S : S_PCIE_RX_KB_S, 0);
    RETURN(NVML_SUCCESS);
}
